"""The moment of recovery, as the page shows it, with real workers: the interrupted reply kept
and dimmed, one status line at a time, the resumed stream in its place."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from playwright.sync_api import Page, expect

from continuity.models import Message
from tests.helpers.brains import KILL_ALWAYS
from tests.helpers.browser import log_in, send_from_page
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import (
    ARTIFACTS,
    WatchdogProcess,
    WebProcess,
    WorkerProcess,
    process_id,
)
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG_QUESTION = "Hi, my goal is to finish the migration, and I like tea."
# A backoff long enough to watch the waiting page, short enough for the suite.
WATCHABLE = {"CONTINUITY_CRASH_BACKOFF_SECONDS": "6,6,6", "CONTINUITY_BUILTIN_TOKEN_DELAY": "0.08"}

# Everything that tells the person about the state of a message or the conversation.
NOTICES = "[data-slow-hint], #conversation-status .banner, .bubble.notice, .banner.recovery"


def visible_notices(page: Page) -> list[str]:
    return page.evaluate(
        """(selector) => [...document.querySelectorAll(selector)]
            .filter((el) => el.checkVisibility())
            .map((el) => el.textContent.trim().replace(/\\s+/g, " "))""",
        NOTICES,
    )


def screenshots(page: Page, name: str) -> None:
    """The page as it is now, in the light and the dark scheme."""
    ARTIFACTS.mkdir(exist_ok=True)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        page.screenshot(path=ARTIFACTS / f"{name}-{scheme}.png", full_page=True)
    page.emulate_media(color_scheme="light")


def open_chat(page: Page, web, conversation) -> None:
    log_in(page, web, conversation.owner.username)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")


def test_a_sigkill_mid_reply_keeps_the_partial_reply_and_shows_one_status(page: Page, processes):
    worker = processes.add(WorkerProcess(**WATCHABLE))
    processes.add(WatchdogProcess(**WATCHABLE))
    web = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_chat(page, web, conversation)
    send_from_page(page, LONG_QUESTION)
    message = wait_for(
        lambda: Message.objects.filter(conversation=conversation).first(), timeout=10, what="it"
    )
    crashed = wait_streaming(message)
    exchange = page.locator(f"#exchange-{message.pk}")
    streamed = exchange.locator("[data-streaming] .streamed")
    expect(streamed).to_have_text(re.compile(r"\w+ \w+ \w+"), timeout=20_000)
    os.kill(process_id(crashed), signal.SIGKILL)

    # From the kill until the next attempt streams: never more than one notice, and while the
    # message waits its backoff, exactly one, with the partial reply kept and dimmed.
    interrupted = exchange.locator("[data-interrupted]")
    seen_while_waiting: list[list[str]] = []
    deadline = time.monotonic() + 60
    resumed = exchange.locator(f'[data-streaming]:not([data-run="{crashed.pk}"])')
    while not resumed.count():
        assert time.monotonic() < deadline, "the next attempt never streamed"
        notices = visible_notices(page)
        assert len(notices) <= 1, notices
        if interrupted.count() and exchange.get_attribute("data-state") == "queued":
            seen_while_waiting.append(notices)
            if len(seen_while_waiting) == 1:
                kept = interrupted.inner_text()
                expect(interrupted).to_contain_text(re.compile(r"Interrupted at \S+"))
                expect(interrupted).to_contain_text("(a worker process stopped)")
                screenshots(page, "recovery-crash-in-progress")
        page.wait_for_timeout(100)
    assert seen_while_waiting, "the interrupted reply was never shown while it waited"
    # The message's event and the status's are two: on a loaded machine the dimmed reply may
    # show a moment before the status does. From the status on, it stays until the resume.
    while seen_while_waiting and not seen_while_waiting[0]:
        seen_while_waiting.pop(0)
    assert seen_while_waiting, "no status while the message waited"
    assert all(len(notices) == 1 for notices in seen_while_waiting), seen_while_waiting
    assert any("Picking up again in" in notices[0] for notices in seen_while_waiting)
    assert not any("Taking longer than usual" in n[0] for n in seen_while_waiting)
    first_words = kept.split()[:3]
    assert first_words and " ".join(first_words) in crashed_text(crashed)
    expect(page.get_by_role("button", name="Retry now")).to_have_count(0)

    # The resumed stream took the partial reply's place, and the banner says what happened.
    expect(exchange.locator(".bubble.assistant")).to_have_count(1)
    reply = exchange.locator(".bubble.assistant.markdown")
    expect(reply).to_contain_text("Noted that you like tea.", timeout=30_000)
    banner = exchange.locator("[data-recovery]")
    expect(banner).to_contain_text(
        re.compile(r"Sorry, I was cut off at [^,]+, and started again\.")
    )
    expect(exchange.locator("[data-interrupted]")).to_have_count(0)
    assert len(visible_notices(page)) == 1  # the banner; the status line is gone
    screenshots(page, "recovery-after")
    banner.get_by_text("Show what was recovered").click()
    expect(banner).to_contain_text("(a worker process stopped)")
    screenshots(page, "recovery-after-details")
    page.get_by_role("link", name="What I was given to go on").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("What was recovered")
    screenshots(page, "recovery-context-page")
    assert worker.alive()


def crashed_text(run) -> str:
    return "".join(run.reply_chunks.order_by("seq").values_list("text", flat=True))


def test_a_planned_restart_keeps_the_partial_reply_and_says_it_picks_up_again(
    page: Page, processes
):
    worker = processes.add(WorkerProcess(**WATCHABLE))
    web = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_chat(page, web, conversation)
    send_from_page(page, LONG_QUESTION)
    message = wait_for(
        lambda: Message.objects.filter(conversation=conversation).first(), timeout=10, what="it"
    )
    wait_streaming(message)
    exchange = page.locator(f"#exchange-{message.pk}")
    expect(exchange.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=20_000)
    worker.signal(signal.SIGTERM)
    worker.popen.wait(timeout=30)

    interrupted = exchange.locator("[data-interrupted]")
    expect(interrupted).to_contain_text("(a planned restart)")
    expect(exchange.locator(".state")).to_have_text(re.compile("Queued"))
    status = page.locator("[data-resuming]")
    expect(status).to_have_text("Picking up again as soon as a worker is free…")
    page.wait_for_timeout(6_000)  # past the "taking longer" delay: the status explains the wait
    assert visible_notices(page) == ["Picking up again as soon as a worker is free…"]

    processes.add(WorkerProcess(**WATCHABLE))
    reply = exchange.locator(".bubble.assistant.markdown")
    expect(reply).to_contain_text("Noted that you like tea.", timeout=30_000)
    expect(interrupted).to_have_count(0)
    expect(status).to_have_count(0)
    expect(exchange.locator("[data-recovery]")).to_contain_text("(a planned restart)")


def test_a_message_that_keeps_killing_the_worker_shows_one_outcome(page: Page, processes):
    processes.add(WorkerProcess(CONTINUITY_BRAIN="faulty"))
    processes.add(WatchdogProcess())
    web = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_chat(page, web, conversation)
    send_from_page(page, f"{KILL_ALWAYS} Hi, my name is Ada and I like tea.")
    message = wait_for(
        lambda: Message.objects.filter(conversation=conversation).first(), timeout=10, what="it"
    )
    exchange = page.locator(f"#exchange-{message.pk}")
    expect(exchange.locator("[data-outcome]")).to_contain_text(
        "This message could not be processed", timeout=60_000
    )
    assert message.runs.count() == 3
    # One outcome: the two interruptions before it are details, closed, not banners.
    notices = visible_notices(page)
    assert len(notices) == 1, notices
    outcome = notices[0]
    assert outcome.startswith("This message could not be processed")
    expect(exchange.locator(".banner.recovery")).to_have_count(0)
    expect(exchange.locator("[data-interrupted]")).to_have_count(0)
    details = exchange.locator("[data-earlier-attempts]")
    # Three attempts, each killed: all three counted (the third was resumed by none).
    expect(details.locator("summary")).to_have_text("Details: 3 attempts were interrupted")
    expect(details).not_to_have_attribute("open", "")
    screenshots(page, "recovery-dead-lettered")
    details.locator("summary").click()
    expect(details.locator("[data-recovery]")).to_have_count(2)
    page.reload()
    expect(exchange.locator("[data-outcome]")).to_be_visible()
    assert len(visible_notices(page)) == 1
