"""axe-core on every page a person uses, in the states that show the most: no violations."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone
from playwright.sync_api import Page

from continuity.actions import dead_letter_retry, message_edit
from continuity.context.handoffs import handoff_write
from continuity.delivery.inbox import message_accept
from continuity.models import Alert, Conversation, CrashRecord, Handoff, Message, Run
from tests.helpers.browser import accessibility_violations, log_in
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def site(processes):
    return processes.add(WebProcess())


def assert_accessible(page: Page, path: str, site: WebProcess) -> None:
    page.goto(site.url + path)
    page.wait_for_load_state("networkidle")
    assert accessibility_violations(page) == [], path


def test_the_checker_finds_a_violation_when_there_is_one(page: Page, site):
    page.goto(f"{site.url}/accounts/login/")
    page.evaluate(
        "document.querySelector('main, body').insertAdjacentHTML('beforeend', '<img src=x.png>')"
    )
    assert any(line.startswith("image-alt") for line in accessibility_violations(page))


def test_signed_out_pages(page: Page, site):
    for path in ["/accounts/login/", "/accounts/signup/", "/accounts/password/reset/"]:
        assert_accessible(page, path, site)


def test_the_pages_of_a_person_chatting(page: Page, site):
    owner = UserFactory(username="ann")
    chat = ConversationFactory(owner=owner, state="paused")
    asked = message_accept(conversation=chat, text="My name is Ada", client_id=uuid.uuid4())
    Message.objects.create(
        conversation=chat,
        role="assistant",
        text="Nice to meet you, **Ada**!",
        state="done",
        reply_to=asked,
        cut_off=True,  # its note and its Continue button are checked too
    )
    Message.objects.filter(pk=asked.pk).update(state="done")
    Conversation.objects.filter(pk=chat.pk).update(state="active")
    dead = dead_letter_make(chat, "Summarize [[broken]]")
    another = dead_letter_make(chat, "Another cracked one")
    message_edit(message=another.message, text="Another one", client_id=uuid.uuid4())
    dead_letter_retry(dead_letter=dead, by=UserFactory(is_staff=True), text="Summarize")
    Conversation.objects.filter(pk=chat.pk).update(state="paused")
    handoff_write(
        conversation_id=chat.pk,
        reason=Handoff.Reason.USER_CORRECTION,
        sections={
            "current_state": "Working on: bake bread",
            "critical_context": "Correction from the user: the deadline is Monday",
            "next_steps": "Buy flour",
            "decisions": "Rye, not wheat",
        },
    )
    log_in(page, site, "ann")
    for path in [
        "/",
        f"/c/{chat.pk}/",
        f"/c/{chat.pk}/notes/",
        "/memory/",
        "/accounts/password/",
        "/accounts/email/",
        "/c/999999/",
        "/search/?q=Ada",
        "/search/?q=cracked",  # only on an earlier version: it was edited
    ]:
        assert_accessible(page, path, site)
    assert page.locator("[data-earlier-versions]").is_visible()


def test_the_staff_console(page: Page, site):
    UserFactory(username="opal", is_staff=True)
    chat = ConversationFactory(paused_reason="3 crashes in 1 hour")
    dead = dead_letter_make(chat)
    Conversation.objects.filter(pk=chat.pk).update(state="paused")
    run = Run.objects.filter(message=dead.message).first()
    Run.objects.filter(pk=run.pk).update(state="crashed")
    CrashRecord.objects.create(
        conversation=chat, message=dead.message, run=run, detected_by="watchdog"
    )
    Alert.objects.create(
        kind="conversation_paused", conversation=chat, text="paused", created_at=timezone.now()
    )
    log_in(page, site, "opal")
    for path in [
        "/dashboard/",
        "/dashboard/dead-letters/",
        f"/dashboard/dead-letters/{dead.pk}/",
        "/dashboard/crashes/",
        "/dashboard/paused/",
        f"/dashboard/conversations/{chat.pk}/",
        "/dashboard/alerts/",
    ]:
        assert_accessible(page, path, site)
