"""One clock: every time a person sees is in their own time zone, in one format; exports carry
the offset; the staff console keeps UTC, says so once, and shows the viewer's zone on request."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import Browser, expect

from continuity.context.memory import memory_remember
from continuity.delivery import bucket_start
from continuity.delivery.history import REPLY_BOUNDS_SECONDS
from continuity.models import DeadLetter, HistoryBucket, Message
from tests.helpers.browser import log_in
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory
from tests.helpers.processes import WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# 17:30 UTC on 1 July 2026 is 13:30 in New York (EDT, UTC−4).
AT = datetime(2026, 7, 1, 17, 30, 5, tzinfo=UTC)
ZONE = "America/New_York"


@pytest.fixture
def site(processes):
    return processes.add(WebProcess())


@pytest.fixture
def page(browser: Browser):
    context = browser.new_context(timezone_id=ZONE, locale="en-US")
    yield context.new_page()
    context.close()


def test_a_person_sees_every_time_in_their_own_zone(page, site):
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    message = MessageFactory(conversation=conversation, text="My name is Ada")
    Message.objects.filter(pk=message.pk).update(created_at=AT)
    memory_remember(owner_id=user.pk, key="name", value="Ada")
    user.memory_facts.update(updated_at=AT)

    log_in(page, site, user.username)
    page.goto(f"{site.url}/c/{conversation.pk}/")
    bubble_time = page.locator(f"#exchange-{message.pk} time")
    expect(bubble_time).to_have_text(re.compile(r"^Jul 1, 01:30 PM$"))
    expect(bubble_time).to_have_attribute("title", re.compile("Wednesday, July 1, 2026"))
    export = page.locator("a[data-in-local-time]").first  # in the closed options menu
    expect(export).to_have_attribute("href", re.compile(r"\?tz=America%2FNew_York$"))
    exported = page.request.get(f"{site.url}{export.get_attribute('href')}").text()
    assert "## You · 2026-07-01 13:30:05 -04:00" in exported

    for path in ("/memory/", "/conversations/"):
        page.goto(f"{site.url}{path}")
        times = page.locator("main time[data-local-time]")
        expect(times.first).to_be_attached()
        if path == "/memory/":
            expect(times.first).to_have_text("Jul 1, 01:30 PM")


def test_the_console_says_utc_once_and_shows_the_viewers_zone_on_request(page, site):
    staff = UserFactory(is_staff=True)
    dead_letter = dead_letter_make(ConversationFactory(owner=UserFactory()))
    DeadLetter.objects.filter(pk=dead_letter.pk).update(created_at=AT)

    log_in(page, site, staff.username)
    page.goto(f"{site.url}/dashboard/dead-letters/{dead_letter.pk}/")
    clock = page.locator("[data-console-clock]")
    expect(clock).to_contain_text("Times are in UTC.")
    expect(page.get_by_text(re.compile(r"\bUTC\b"))).to_have_count(1)  # said once
    dead_lettered = page.locator(f'time[datetime="{AT.isoformat()}"]')
    expect(dead_lettered).to_have_text("2026-07-01 17:30:05")

    clock.get_by_role("button", name=f"Show my time zone ({ZONE})").click()
    expect(clock).to_contain_text(f"Times are in your time zone ({ZONE}).")
    expect(dead_lettered).to_have_text("2026-07-01 13:30:05")
    expect(dead_lettered).to_have_attribute("title", "2026-07-01 17:30:05 UTC")
    page.reload()  # the choice is kept
    expect(dead_lettered).to_have_text("2026-07-01 13:30:05")
    clock.get_by_role("button", name="Show UTC").click()
    expect(dead_lettered).to_have_text("2026-07-01 17:30:05")


def test_the_console_charts_follow_the_chosen_clock(page, site):
    staff = UserFactory(is_staff=True)
    start = bucket_start(datetime.now(UTC) - timedelta(hours=1))
    within = [3] + [0] * len(REPLY_BOUNDS_SECONDS)  # all three within the first bound
    HistoryBucket.objects.create(
        start=start, rolled_up=True, answered=3, reply_seconds=1.5, replies_within=within
    )
    there = start.astimezone(ZoneInfo(ZONE))

    log_in(page, site, staff.username)
    page.goto(f"{site.url}/dashboard/history/")
    bar = page.locator('[data-chart="answered"] rect title')
    expect(bar).to_have_text(f"Messages answered, 5 minutes from {start:%a %H:%M} UTC: 3 replies")
    tick = page.locator('[data-chart="answered"] text.tick').first
    first = datetime.fromisoformat(tick.get_attribute("data-clock-at"))
    expect(tick).to_have_text(f"{first:%H:%M}")

    page.locator("[data-console-clock]").get_by_role("button").click()
    expect(bar).to_have_text(f"Messages answered, 5 minutes from {there:%a %H:%M}: 3 replies")
    expect(tick).to_have_text(f"{first.astimezone(ZoneInfo(ZONE)):%H:%M}")
    page.goto(f"{site.url}/dashboard/")  # the crash chart, and its caption
    expect(page.locator(".chart figcaption")).to_contain_text(f"({ZONE}, one bar per hour")


def test_the_chart_labels_stay_readable_on_a_phone(page, site):
    staff = UserFactory(is_staff=True)
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, site, staff.username)
    page.goto(f"{site.url}/dashboard/history/")
    ticks = page.locator('[data-chart="answered"] text.tick')
    expect(ticks.first).to_be_visible()
    shown = [tick for tick in ticks.all() if tick.is_visible()]
    assert 3 <= len(shown) < ticks.count()  # every other label gives way
    heights = [tick.evaluate("t => t.getBoundingClientRect().height") for tick in shown]
    assert min(heights) >= 11, heights  # a 10 px font's box; it was 6 px
