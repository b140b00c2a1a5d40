"""Staff correct an agent's working memory in the Django admin, in Chromium, and the next
reply follows the correction."""

from __future__ import annotations

import uuid

import pytest
from playwright.sync_api import Page, expect

from continuity.delivery.inbox import message_accept
from continuity.models import Handoff, Message
from tests.helpers.browser import off_the_loop
from tests.helpers.factories import PASSWORD, ConversationFactory, UserFactory
from tests.helpers.processes import ARTIFACTS, WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NEXT_STEP = "Call the vendor about the invoice"


def answered(conversation, text: str) -> str:
    message = off_the_loop(
        message_accept, conversation=conversation, text=text, client_id=uuid.uuid4()
    )
    reply = wait_for(
        lambda: Message.objects.filter(reply_to=message).first(),
        timeout=30,
        what=f"a reply to {text!r}",
    )
    return reply.text


def test_staff_edit_a_handoff_and_the_next_reply_uses_it(page: Page, processes):
    processes.add(WorkerProcess())
    site = processes.add(WebProcess())
    violations: list[str] = []
    page.on(
        "console",
        lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    conversation = ConversationFactory(owner=UserFactory())
    answered(conversation, "My goal is to pay the supplier")
    assert Handoff.objects.filter(conversation=conversation).count() == 1
    staff = UserFactory(is_staff=True, is_superuser=True)

    page.goto(f"{site.url}/admin/login/")
    page.get_by_label("Username").fill(staff.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{site.url}/admin/continuity/conversation/{conversation.pk}/change/")
    expect(page.locator("#handoffs-group")).to_contain_text("After a reply")  # handoff history
    page.get_by_role("link", name="Edit the handoff as a new version").click()

    steps = page.get_by_label("Immediate next steps")
    expect(steps).to_have_value("Say what “pay the supplier” looks like when it is done\n"
                                "Split it into three small tasks you can finish in a day each\n"
                                "Do the first task and tell me how it went")  # fmt: skip
    steps.fill(f"{NEXT_STEP}\nThen pay the supplier")
    page.get_by_label("Decisions made").press("End")
    page.get_by_label("Decisions made").type("\nPay by bank transfer, not card")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "admin-handoff-editor.png", full_page=True)
    page.get_by_role("button", name="Save as version 2").click()

    expect(page.locator(".messagelist")).to_contain_text(f"(by {staff.username})")
    expect(page.locator(".handoff-markdown")).to_contain_text(f"1. {NEXT_STEP}")
    edited = Handoff.objects.get(conversation=conversation, version=2)
    assert (edited.reason, edited.author) == (Handoff.Reason.STAFF_EDIT, staff)
    assert edited.next_steps.splitlines()[0] == NEXT_STEP

    page.get_by_role("link", name="Changes since the previous version").click()
    expect(page.locator(".diff-added").filter(has_text=f"+1. {NEXT_STEP}")).to_be_visible()
    expect(page.locator(".diff-removed").filter(has_text="-1. Say what")).to_be_visible()
    page.screenshot(path=ARTIFACTS / "admin-handoff-diff.png", full_page=True)

    reply = answered(conversation, "Where were we?")
    assert reply.endswith(f"Next step: {NEXT_STEP}.")
    assert not violations, violations
