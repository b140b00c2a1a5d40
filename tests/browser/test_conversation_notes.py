"""Recall you can trust, in Chromium: two conversations each state a goal; in one, the person
adds a correction while a reply is being written and staff add a line in the admin; "where were
we?" then speaks of that conversation's goal, the correction and the staff line, and of nothing
from the other conversation."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Page, expect

from continuity.models import Handoff, Message
from tests.helpers.browser import accessibility_violations, log_in
from tests.helpers.factories import PASSWORD, ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CORRECTION = "My deadline moved to Monday"
STAFF_LINE = "The oven runs 10 degrees hot"


def say(page: Page, text: str) -> None:
    """Send `text` and wait for its whole reply."""
    replies = page.locator(".bubble.assistant")
    before = replies.count()
    page.get_by_label("Message").fill(text)
    page.keyboard.press("Enter")
    expect(replies).to_have_count(before + 1, timeout=20_000)
    expect(page.locator("[data-streaming]")).to_have_count(0, timeout=20_000)


def test_where_were_we_recalls_this_conversation_its_correction_and_staff_line(
    page: Page, browser: Browser, processes
):
    processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.1"))
    site: WebProcess = processes.add(WebProcess())
    owner = UserFactory(username="dee")
    bread = ConversationFactory(owner=owner, title="Bread")
    spanish = ConversationFactory(owner=owner, title="Spanish")
    log_in(page, site, "dee")
    page.goto(f"{site.url}/c/{spanish.pk}/")
    say(page, "My goal is to learn Spanish")
    page.goto(f"{site.url}/c/{bread.pk}/")
    say(page, "My goal is to bake sourdough bread")

    # A new goal, whose reply (its plan) takes seconds to write: the correction comes meanwhile.
    page.get_by_label("Message").fill("My goal is to bake sourdough bread by Friday")
    page.keyboard.press("Enter")
    expect(page.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=15_000)
    notes = page.context.new_page()
    notes.goto(f"{site.url}/c/{bread.pk}/notes/")
    expect(notes.get_by_role("heading", name="Notes for this conversation")).to_be_visible()
    assert accessibility_violations(notes) == []
    notes.get_by_label("What should the assistant know instead?").fill(CORRECTION)
    notes.get_by_role("button", name="Add to the notes").click()
    expect(notes.get_by_role("status")).to_contain_text("Added.")
    expect(page.locator("[data-streaming]")).to_have_count(0, timeout=20_000)
    corrected = Handoff.objects.get(conversation=bread, reason="user_correction")
    after_reply = Handoff.objects.filter(
        conversation=bread, reason=Handoff.Reason.AFTER_REPLY
    ).latest("version")
    assert corrected.version < after_reply.version  # made mid-reply, and kept at its end
    assert f"Correction from the user: {CORRECTION}" in after_reply.critical_context

    staff = UserFactory(is_staff=True, is_superuser=True)
    admin = browser.new_page()
    admin.goto(f"{site.url}/admin/login/")
    admin.get_by_label("Username").fill(staff.username)
    admin.get_by_label("Password").fill(PASSWORD)
    admin.get_by_role("button", name="Log in").click()
    admin.goto(f"{site.url}/admin/continuity/conversation/{bread.pk}/change/")
    admin.get_by_role("link", name="Edit the handoff as a new version").click()
    critical = admin.get_by_label("Critical context")
    critical.press("End")
    critical.type(f"\n{STAFF_LINE}")
    admin.get_by_role("button", name=re.compile(r"^Save as version")).click()
    expect(admin.locator(".messagelist")).to_contain_text(f"(by {staff.username})")
    assert accessibility_violations(admin) == []

    say(page, "Where were we?")
    recap = page.locator(".bubble.assistant").last
    expect(recap).to_contain_text("Your goal in this conversation: bake sourdough bread by Friday")
    expect(recap).to_contain_text(f"Correction from the user: {CORRECTION}")
    expect(recap).to_contain_text(STAFF_LINE)
    expect(recap).not_to_contain_text("Spanish")
    expect(recap).to_contain_text(re.compile(r"Next step: Say what .bake sourdough bread by"))
    recaps = Message.objects.filter(conversation=bread, text__startswith="Here is where")
    reply = wait_for(
        lambda: recaps.first(),
        timeout=10,
        what="the recap stored",
    )
    assert reply.text.count("Next step") == 1

    # The notes page shows the same, and a line forgotten there is gone from the next recap.
    notes.reload()
    expect(notes.locator("[data-notes-goal]")).to_have_text("bake sourdough bread by Friday")
    notes.get_by_role("button", name=f"Forget “{STAFF_LINE}”").click()
    expect(notes.get_by_role("status")).to_contain_text("Forgotten.")
    expect(notes.locator("[data-notes-keep]")).not_to_contain_text(STAFF_LINE)
    say(page, "Where were we?")
    expect(page.locator(".bubble.assistant").last).not_to_contain_text(STAFF_LINE)
