"""The page repairs its live view: the test plays the worker, publishing chunks itself.

No worker runs here; each test owns the conversation's attempt and decides which events reach
the page's socket, so what the page must do (skip, repair, catch up) is certain.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest
from playwright.sync_api import Page, expect

from continuity.delivery.attempts.finish import attempt_finish
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import chunk_store
from continuity.live.events import publish_reply_chunk, publisher, publisher_close
from continuity.models import ReplyChunk
from tests.helpers.browser import log_in, off_the_loop
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess
from tests.helpers.redis_server import session_redis_stalled
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

REPLY = "Hello world, all done."


@pytest.fixture
def streaming(page: Page, processes):
    return open_streaming(page, processes)


def open_streaming(page: Page, processes, **web_env: str):
    """A page showing chunk 1 of a running attempt: its web process, the message, the attempt."""
    web = processes.add(WebProcess(**web_env))
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    message = message_accept(conversation=conversation, text="Say hello", client_id=uuid.uuid4())
    run = attempt_begin(conversation_id=conversation.pk)
    log_in(page, web, user.username)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    expect(page.locator(f'[data-streaming][data-run="{run.pk}"]')).to_be_attached()
    off_the_loop(chunk_store, run=run, seq=1, text="Hello ")
    expect(streamed(page)).to_have_text("Hello ")
    return web, message, run


def streamed(page: Page):
    return page.locator("[data-streaming] .streamed")


def test_a_lost_chunk_is_repaired_from_the_database(page: Page, streaming):
    _, _, run = streaming
    ReplyChunk.objects.create(message_id=run.message_id, run=run, seq=2, text="brave ")  # lost
    off_the_loop(chunk_store, run=run, seq=3, text="new ")
    expect(streamed(page)).to_have_text("Hello brave new ")
    off_the_loop(chunk_store, run=run, seq=4, text="world")
    expect(streamed(page)).to_have_text("Hello brave new world")


def test_a_chunk_of_an_earlier_attempt_is_ignored(page: Page, streaming):
    _, message, run = streaming
    off_the_loop(
        publish_reply_chunk,
        conversation_id=message.conversation_id,
        message_id=message.pk,
        run_id=run.pk - 1,
        seq=2,
        text="STALE ",
    )
    off_the_loop(chunk_store, run=run, seq=2, text="world")
    expect(streamed(page)).to_have_text("Hello world")
    expect(page.get_by_text("STALE")).to_have_count(0)


def test_a_reply_that_finished_while_the_socket_was_down_is_caught_up(
    page: Page, streaming, processes
):
    web, message, run = streaming
    page.evaluate("window.__sameDocument = true")
    web.kill_all()
    expect(page.locator("[data-live-indicator]")).to_have_text(re.compile("reconnecting"))
    off_the_loop(chunk_store, run=run, seq=2, text="world")  # published to nobody
    off_the_loop(attempt_finish, run=run, reply_text=REPLY)

    processes.add(WebProcess(port=web.port))
    expect(page.locator("[data-live-indicator]")).to_have_text("live", timeout=15_000)
    expect_answered(page, message)
    assert page.evaluate("window.__sameDocument") is True  # caught up without a reload


def expect_answered(page: Page, message, timeout: float = 5_000) -> None:
    exchange = page.locator(f"#exchange-{message.pk}")
    expect(exchange.locator(".state")).to_have_text(re.compile("Done"), timeout=timeout)
    expect(exchange.locator(".bubble.assistant.markdown")).to_have_text(REPLY)
    expect(page.locator("[data-answer-status]")).to_have_text("Answered")


def reply_committed_in_a_redis_stall(run) -> None:
    """The attempt's reply commits while Redis is frozen: its live update times out, and the
    publisher drops what follows for a while. The page is left showing "Answering…", its socket
    open (daphne's channel-layer reads wait longer than the stall)."""
    with session_redis_stalled():
        off_the_loop(attempt_finish, run=run, reply_text=REPLY)
        assert publisher().flush(timeout=10)
        assert publisher().paused_until > time.monotonic(), "the publish should have failed"


def test_a_reply_a_redis_stall_kept_from_the_page_comes_with_the_slow_hint(page: Page, processes):
    # No periodic catch-up: the slow hint's is the only one that can bring the reply.
    _, message, run = open_streaming(page, processes, CONTINUITY_PAGE_RESYNC_SECONDS="0")
    reply_committed_in_a_redis_stall(run)
    expect(page.locator(f"#exchange-{message.pk} .state")).to_have_text("Answering…")
    # The hint shows 5 s after the last chunk; the reply follows it at once.
    expect_answered(page, message, timeout=12_000)


def test_a_reply_a_redis_stall_kept_from_the_page_comes_within_15_s(page: Page, processes):
    _, message, run = open_streaming(page, processes)
    # Already shown, so its own catch-up is spent: only the periodic one can bring the reply.
    expect(page.locator("[data-slow-hint]")).to_be_visible(timeout=10_000)
    reply_committed_in_a_redis_stall(run)
    # Not checked here that the page still says "Answering…": the periodic catch-up runs on
    # its own clock, and on a loaded machine it came between the commit and such a check (a
    # fresh-clone run failed so). The push is known lost (the publish failed), and the socket
    # stayed open: only that catch-up can bring the reply.
    expect_answered(page, message, timeout=15_000 + 5_000)
    expect(page.locator("[data-slow-hint]")).to_be_hidden()


GROUP_EXPIRY = 2


@pytest.fixture
def short_group_expiry(settings):
    """Channel groups that expire after GROUP_EXPIRY seconds, in this process (whose publisher
    drops members older than that) and in the web process (whose joins set the groups' TTL in
    Redis): the environment for the web process."""
    layer = settings.CHANNEL_LAYERS["default"]
    config = {**layer["CONFIG"], "group_expiry": GROUP_EXPIRY}
    settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": config}}
    publisher_close()
    yield {"CHANNEL_GROUP_EXPIRY_SECONDS": str(GROUP_EXPIRY)}
    publisher_close()


def test_a_page_open_longer_than_the_group_expiry_still_receives(
    page: Page, processes, short_group_expiry
):
    web = processes.add(WebProcess(**short_group_expiry))
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    log_in(page, web, user.username)
    page.goto(f"{web.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    page.evaluate("window.__sameDocument = true")
    opened = time.monotonic()
    wait_for(
        lambda: time.monotonic() - opened > 3 * GROUP_EXPIRY,
        timeout=4 * GROUP_EXPIRY,
        what="the page's socket to outlive its groups' expiry",
    )
    # Sent from another tab: nothing is waiting on this page, so only its live event brings it.
    message = message_accept(
        conversation=conversation, text="From the other tab", client_id=uuid.uuid4()
    )
    expect(page.locator(f"#exchange-{message.pk}")).to_contain_text("From the other tab")
    assert page.evaluate("window.__sameDocument") is True
