"""What the page says next to the composer while the system detects an interruption, waits out
a backoff, or is paused. No worker runs: each test sets up the state itself."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.pauses import conversation_pause
from continuity.live.events import publish_message_changed
from continuity.models import Conversation, Run
from tests.helpers.browser import accessibility_violations, log_in
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory
from tests.helpers.processes import ARTIFACTS, WatchdogProcess, WebProcess
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def site(processes):
    return processes.add(WebProcess())


def open_conversation(page: Page, site, conversation) -> None:
    log_in(page, site, conversation.owner.username)
    page.goto(f"{site.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")


def below_the_exchanges_above_the_composer(page: Page, notice) -> None:
    """Where the person is looking: in the dock that holds the composer, just above it."""
    dock = page.locator(".composer-dock")
    expect(dock.locator("#composer")).to_be_visible()

    def boxes():
        # The status is re-rendered over the websocket: measure between two renderings.
        found = notice.bounding_box(), dock.locator("#composer").bounding_box()
        return found if None not in found else None

    notice_box, composer_box = wait_for(boxes, timeout=5, what="the notice and the composer")
    assert notice_box["y"] + notice_box["height"] <= composer_box["y"] + 1
    assert composer_box["y"] - (notice_box["y"] + notice_box["height"]) < 60


def test_a_reply_with_no_chunk_for_a_few_seconds_is_taking_longer_than_usual(page: Page, site):
    conversation = ConversationFactory(owner=UserFactory())
    MessageFactory(conversation=conversation, text="Are you there?")
    run = attempt_begin(conversation_id=conversation.pk)  # running, and nothing is published
    assert run is not None

    open_conversation(page, site, conversation)
    expect(page.locator(f'[data-streaming][data-run="{run.pk}"]')).to_be_attached()
    hint = page.get_by_text("Taking longer than usual…")
    expect(hint).to_be_hidden()  # not at once: a first chunk usually comes quickly
    expect(hint).to_be_visible(timeout=12_000)
    below_the_exchanges_above_the_composer(page, hint)


def test_a_backoff_shows_a_countdown_and_retry_now_ends_it(page: Page, site):
    conversation = ConversationFactory(owner=UserFactory())
    message = MessageFactory(conversation=conversation, text="Try this", attempts=2)
    now = timezone.now()
    for attempt in (1, 2):
        Run.objects.create(
            conversation=conversation,
            message=message,
            attempt=attempt,
            state=Run.State.CRASHED,
            heartbeat_at=now,
            ended_at=now,
        )
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=now + timedelta(seconds=90))

    open_conversation(page, site, conversation)
    # Why the wait is this long: it grows with each crash of the message.
    expect(page.locator("#conversation-status")).to_contain_text(
        "I was cut off 2 times in a row on this message, so I wait a little longer before each try."
    )
    countdown = page.locator("#conversation-status [data-countdown]")
    expect(countdown).to_have_text(re.compile(r"Picking up again in (8\d|90) s…"))
    first = countdown.text_content()
    expect(countdown).not_to_have_text(first, timeout=3_000)  # it counts down
    retry = page.get_by_role("button", name="Retry now")
    below_the_exchanges_above_the_composer(page, page.locator("#conversation-status"))
    expect(page.get_by_text("Taking longer than usual…")).to_be_hidden()

    with page.expect_response(re.compile(r"/retry-now/$")) as answer:
        retry.click()
    assert answer.value.status == 200
    expect(page).to_have_url(f"{site.url}/c/{conversation.pk}/")  # swapped in place
    expect(countdown).to_have_count(0)
    expect(retry).to_have_count(0)
    conversation.refresh_from_db()
    assert conversation.retry_at <= timezone.now()
    assert conversation.state == Conversation.State.ACTIVE


def test_a_paused_conversation_says_so_next_to_the_composer(page: Page, site):
    conversation = ConversationFactory(owner=UserFactory())
    MessageFactory(conversation=conversation, text="Hello?", attempts=3)
    Conversation.objects.filter(pk=conversation.pk).update(
        state=Conversation.State.PAUSED, paused_reason="3 crashes within 3600 s"
    )

    open_conversation(page, site, conversation)
    paused = page.locator("[data-paused]")
    expect(paused).to_contain_text("Paused.")
    below_the_exchanges_above_the_composer(page, paused)
    expect(page.get_by_text(re.compile("try again shortly"))).to_have_count(0)
    expect(page.get_by_role("button", name="Retry now")).to_have_count(0)
    page.wait_for_timeout(6_000)  # past the "taking longer" delay: the pause explains the wait
    expect(page.get_by_text("Taking longer than usual…")).to_be_hidden()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "composer-paused.png", full_page=True)


def test_the_screen_reader_status_says_a_pause_not_answering(page: Page, site):
    """The page's live region said "Answering…" when an attempt began; when it is cut off and
    the conversation paused, it says so: "Answering…" is not the last thing said."""
    conversation = ConversationFactory(owner=UserFactory())
    message = MessageFactory(conversation=conversation, text="Hello?")
    open_conversation(page, site, conversation)
    said = page.locator("[data-answer-status]")

    run = attempt_begin(conversation_id=conversation.pk)
    publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    expect(said).to_have_text("Answering…")

    attempt_end(run_id=run.pk, state="crashed", error="boom", detected_by="watchdog")
    conversation_pause(conversation=Conversation.objects.get(pk=conversation.pk), reason="test")
    publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    expect(page.locator("[data-paused]")).to_be_visible()
    expect(said).to_have_text("Paused: your messages are kept")


def test_with_no_worker_alive_the_person_is_told_and_staff_alerted(page: Page, processes):
    """No worker runs (none was started): within seconds of a message's sending the watchdog
    raises its alert, the person's page says no assistant runs (live, not "taking longer"),
    and the overview says it at its top."""
    processes.add(WatchdogProcess(CONTINUITY_NO_WORKER_ALERT_SECONDS="2"))
    site = processes.add(WebProcess())
    conversation = ConversationFactory(owner=UserFactory())
    open_conversation(page, site, conversation)
    page.get_by_label("Message").fill("Is anyone there?")
    page.get_by_label("Message").press("Enter")

    notice = page.locator("#conversation-status [data-no-worker]")
    expect(notice).to_have_text(
        "No assistant is running right now. Your message is saved and will be answered when "
        "one starts.",
        timeout=15_000,
    )
    expect(page.get_by_text("Taking longer than usual…")).to_be_hidden()
    expect(page.locator("[data-answer-status]")).to_have_text("No assistant is running right now")
    assert not accessibility_violations(page)
    page.screenshot(path=ARTIFACTS / "no-worker-person.png", full_page=True)

    staff = page.context.browser.new_context().new_page()
    log_in(staff, site, UserFactory(is_staff=True).username)
    staff.goto(f"{site.url}/dashboard/")
    expect(staff.locator("[data-no-worker-alert]")).to_contain_text("No worker is running.")
    assert not accessibility_violations(staff)
    staff.screenshot(path=ARTIFACTS / "no-worker-overview.png", full_page=True)
