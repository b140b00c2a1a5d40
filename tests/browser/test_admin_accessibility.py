"""axe-core on the Django admin pages staff use for this product: no violations, and nothing
the Content Security Policy blocks."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse
from playwright.sync_api import Page

from continuity.context.compaction import summary_write
from continuity.context.handoffs import handoff_write
from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import drain_conversation
from continuity.models import DeadLetter, Handoff, McpServer, Message, Run, Summary, ToolCall
from tests.helpers.browser import accessibility_violations, off_the_loop
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import PASSWORD, ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def staff_pages() -> list[str]:
    chat = ConversationFactory(title="Bread")
    for text in ("My goal is to bake bread", "I like rye"):
        off_the_loop(message_accept, conversation=chat, text=text, client_id=uuid.uuid4())
        off_the_loop(drain_conversation, conversation_id=chat.pk)
    edited = handoff_write(
        conversation_id=chat.pk,
        reason=Handoff.Reason.STAFF_EDIT,
        sections={"current_state": "Working on: bake bread", "critical_context": "Hot oven"},
    )
    first = Message.objects.filter(conversation=chat).order_by("pk").first()
    summary_write(conversation_id=chat.pk, covers_through_id=first.pk, text="- Bread.")
    dead = dead_letter_make(chat, "Summarize [[broken]]")
    server = McpServer.objects.create(name="ledger", url="http://127.0.0.1:9/mcp", time_limit=30)
    server.policies.create(tool="ledger_append", approval="always", time_limit=10)
    call = ToolCall.objects.create(
        message=first, round=1, position=0, call_id="c1", tool="ledger_append", source="ledger",
        arguments={"entry": "rent"}, state="denied", answer="deny", result="Denied.",
    )  # fmt: skip
    return [
        reverse("admin:index"),
        reverse("admin:continuity_conversation_changelist"),
        reverse("admin:continuity_conversation_change", args=[chat.pk]),
        reverse("admin:continuity_message_changelist"),
        reverse("admin:continuity_message_change", args=[first.pk]),
        reverse("admin:continuity_run_changelist"),
        reverse("admin:continuity_run_change", args=[Run.objects.first().pk]),
        reverse("admin:continuity_deadletter_changelist"),
        reverse("admin:continuity_deadletter_change", args=[dead.pk]),
        reverse("admin:continuity_handoff_changelist"),
        reverse("admin:continuity_handoff_change", args=[edited.pk]),
        reverse("admin:continuity_handoff_edit", args=[chat.pk]),
        reverse("admin:continuity_handoff_diff", args=[edited.pk]),
        reverse("admin:continuity_summary_change", args=[Summary.objects.get().pk]),
        reverse("admin:continuity_summary_edit", args=[chat.pk]),
        reverse("admin:continuity_recovery_changelist"),
        reverse("admin:continuity_worker_changelist"),
        reverse("admin:continuity_mcpserver_changelist"),
        reverse("admin:continuity_mcpserver_change", args=[server.pk]),
        reverse("admin:continuity_toolcall_changelist"),
        reverse("admin:continuity_toolcall_change", args=[call.pk]),
    ]


def test_the_admin_pages_staff_use_have_no_violations(page: Page, processes, csp_violations):
    site = processes.add(WebProcess())
    staff = UserFactory(is_staff=True, is_superuser=True)
    paths = staff_pages()
    assert DeadLetter.objects.exists()
    page.goto(f"{site.url}/admin/login/")
    page.get_by_label("Username").fill(staff.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    found, blocked = {}, []
    for path in paths:
        page.goto(site.url + path)
        page.wait_for_load_state("networkidle")
        blocked += csp_violations
        # axe adds a <style> of its own to some pages, which the policy rightly blocks.
        if violations := accessibility_violations(page):
            found[path] = violations
        csp_violations.clear()
    assert found == {}, "\n".join(
        f"{path}: {line}" for path, lines in found.items() for line in lines
    )
    assert blocked == [], "\n".join(blocked)
