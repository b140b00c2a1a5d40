"""Support takes a conversation over mid-reply, talks with the person, and hands it back: the
person and staff in two browser contexts, against daphne, real workers and the watchdog."""

from __future__ import annotations

import re
import signal

import pytest
from playwright.sync_api import Browser, Page, expect

from continuity.models import Conversation, Message, Run, StaffAction
from tests.helpers.browser import accessibility_violations, log_in, send_from_page
from tests.helpers.factories import UserFactory
from tests.helpers.processes import ARTIFACTS, WatchdogProcess, WebProcess, WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SLOW = {"CONTINUITY_BUILTIN_TOKEN_DELAY": "0.1"}


def page_of(browser: Browser, site: WebProcess, username: str, **user) -> Page:
    UserFactory(username=username, **user)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(page, site, username)
    return page


def accessible_everywhere(page: Page, name: str) -> None:
    for width, scheme in ((1280, "light"), (1280, "dark"), (390, "light"), (390, "dark")):
        page.set_viewport_size({"width": width, "height": 900})
        page.emulate_media(color_scheme=scheme)
        assert accessibility_violations(page) == [], (page.url, width, scheme)
        page.screenshot(path=ARTIFACTS / f"{name}-{width}-{scheme}.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.emulate_media(color_scheme="light")


def test_support_takes_over_mid_reply_talks_with_the_person_and_hands_back(browser, processes):
    worker = processes.add(WorkerProcess(**SLOW))
    processes.add(WatchdogProcess())
    site = processes.add(WebProcess())
    user = page_of(browser, site, "ann")
    staff = page_of(browser, site, "opal", first_name="Opal", is_staff=True)

    send_from_page(user, "Hi, my name is Ada, my goal is to finish the migration, and I like tea.")
    expect(user.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=20_000)
    chat = Conversation.objects.get(owner__username="ann")

    # Staff take over mid-reply: the attempt stops where it is, shown as interrupted, not as an
    # answer; the person sees who joined, and the question waits for support.
    staff.goto(f"{site.url}/dashboard/conversations/{chat.pk}/")
    staff.get_by_label("Why take it over").fill("Ann asked for a person")
    staff.get_by_role("button", name="Take over").click()
    expect(staff.locator("[data-takeover]")).to_be_visible()
    joined = user.locator("[data-taken-over]")
    expect(joined).to_contain_text("Opal from support joined the conversation.", timeout=15_000)
    first = Message.objects.get(conversation=chat, text__startswith="Hi, my name is Ada")
    interrupted = user.locator(f"#exchange-{first.pk} [data-interrupted]")
    expect(interrupted).to_contain_text("support took the conversation over")
    expect(user.locator("[data-streaming]")).to_have_count(0)

    # A worker killed during the takeover, and its replacement: the agent answers nothing.
    send_from_page(user, "Can a person help me with my order?")
    asked = wait_for(
        lambda: Message.objects.filter(text__startswith="Can a person").first(),
        timeout=10,
        what="the message to support",
    )
    worker.signal(signal.SIGKILL)
    processes.add(WorkerProcess())  # quick to answer, once it may
    thread = staff.locator("[data-thread]")
    expect(thread).to_contain_text("Can a person help me with my order?", timeout=15_000)
    accessible_everywhere(staff, "console-takeover")
    accessible_everywhere(user, "chat-taken-over")

    staff.get_by_label("Your reply").fill("Hi Ada, I'm Opal. I like tea too.")
    staff.get_by_role("button", name="Send as support").click()
    expect(user.locator(f"#exchange-{first.pk} [data-staff-reply]")).to_contain_text(
        "I like tea too", timeout=15_000
    )
    expect(user.locator(f"#exchange-{first.pk} [data-interrupted]")).to_have_count(0)
    staff.get_by_label("Your reply").fill("Hi Ann, I'm Opal. Your order had two items.")
    staff.get_by_role("button", name="Send as support").click()
    reply = user.locator(f"#exchange-{asked.pk} [data-staff-reply]")
    expect(reply).to_contain_text("Opal · support", timeout=15_000)
    expect(reply).to_contain_text("Hi Ann, I'm Opal. Your order had two items.")
    assert Message.objects.get(reply_to=asked).role == "staff"  # not the agent's

    send_from_page(user, "Please make it three items")
    expect(thread).to_contain_text("Please make it three items", timeout=15_000)
    staff.get_by_label("Your reply").fill("Done: order 123 now has three items.")
    staff.get_by_role("button", name="Send as support").click()
    expect(user.locator("[data-staff-reply]").last).to_contain_text(
        "now has three items", timeout=15_000
    )

    # Hand back with a note: the person sees the assistant is back, which reads the note.
    staff.get_by_label("Note for the assistant").fill("Order 123 now has three items.")
    staff.get_by_role("button", name="Hand back to the assistant").click()
    expect(staff.get_by_text("Handed back")).to_be_visible()
    expect(user.locator("[data-assistant-back]")).to_contain_text(
        "The assistant is back", timeout=15_000
    )
    send_from_page(user, "where were we?")
    recap = wait_for(
        lambda: Message.objects.filter(text="where were we?").first(), timeout=10, what="it"
    )
    answered = user.locator(f"#exchange-{recap.pk}")
    expect(answered).to_have_attribute("data-state", "done", timeout=60_000)
    expect(answered.locator(".bubble.assistant")).to_contain_text("Order 123 now has three items.")
    expect(user.locator("[data-assistant-back]")).to_have_count(0)

    taken = StaffAction.objects.get(kind="take_over").created_at
    handed = StaffAction.objects.get(kind="hand_back").created_at
    assert not Run.objects.filter(started_at__gt=taken, started_at__lt=handed).exists()
    assert not Message.objects.filter(
        role="assistant", created_at__gt=taken, created_at__lt=handed
    ).exists()
    kinds = list(StaffAction.objects.order_by("id").values_list("kind", flat=True))
    assert kinds == ["take_over", "staff_reply", "staff_reply", "staff_reply", "hand_back"]
    expect(staff.locator('[data-audit="hand_back"]')).to_contain_text(re.compile("three items"))
