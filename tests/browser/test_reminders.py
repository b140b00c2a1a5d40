"""Reminders as a person meets them, in a browser whose clock is in New York: set in the
conversation, listed (in their own time) on the memory page where one is cancelled, and one
come due appears live, with the conversation marked on another open page's sidebar. axe-core
finds nothing wrong, light and dark, at 1280 and 390 px."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

from continuity.models import Reminder
from tests.helpers.browser import accessibility_violations, log_in, send_from_page
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import ARTIFACTS, WatchdogProcess, WebProcess, WorkerProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZES = [{"width": 1280, "height": 900}, {"width": 390, "height": 844}]


def assert_clean_everywhere(page) -> None:
    for size in SIZES:
        page.set_viewport_size(size)
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            assert accessibility_violations(page) == [], (page.url, size, scheme)
    page.emulate_media(color_scheme="light")
    page.set_viewport_size(SIZES[0])


def test_a_reminder_is_set_listed_cancelled_and_delivered_live(browser: Browser, processes):
    processes.add(WorkerProcess())
    processes.add(WatchdogProcess())
    web = processes.add(WebProcess())
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner, title="Plants")
    elsewhere = ConversationFactory(owner=owner, title="Elsewhere")
    context = browser.new_context(timezone_id="America/New_York")
    page, other = context.new_page(), context.new_page()
    log_in(page, web, owner.username)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")

    send_from_page(page, "Remind me in 10 minutes to water the plants")
    reply = page.locator(".bubble.assistant").last
    expect(reply).to_contain_text("I'll remind you on", timeout=20_000)
    expect(reply).to_contain_text("(America/New_York): water the plants.")
    page.goto(f"{web.url}/memory/")
    listed = page.locator("[data-reminder-id]")
    expect(listed).to_contain_text(re.compile(r"\(America/New_York\): water the plants"))
    assert_clean_everywhere(page)
    listed.get_by_role("button", name="Cancel the reminder: water the plants").click()
    expect(page.locator("[data-no-reminders]")).to_be_visible()
    assert Reminder.objects.get().state == "cancelled"

    other.goto(f"{web.url}/c/{elsewhere.pk}/")
    expect(other.locator("[data-live-indicator]")).to_have_text("live")
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    send_from_page(page, "Remind me in 3 seconds to stretch")

    came = page.locator("[data-reminder]")
    expect(came).to_have_text("Reminder: stretch", timeout=30_000)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "reminder.png", full_page=True)
    expect(other.locator(f'#conversation-list a[href="/c/{conversation.pk}/"] ~ [data-unread]'))\
        .to_have_text("new message")  # fmt: skip
    assert_clean_everywhere(page)
    assert_clean_everywhere(other)
