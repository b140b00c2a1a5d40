"""The page repairs its live view: the test plays the worker, publishing chunks itself.

No worker runs here; each test owns the conversation's attempt and decides which events reach
the page's socket, so what the page must do (skip, repair, catch up) is certain.
"""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Page, expect

from continuity.delivery.attempts import attempt_begin, attempt_finish
from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import chunk_store
from continuity.live.events import publish_reply_chunk
from continuity.models import ReplyChunk
from tests.browser.helpers import log_in, off_the_loop
from tests.factories import ConversationFactory, UserFactory
from tests.processes import WebProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def streaming(page: Page, processes):
    """A page showing chunk 1 of a running attempt, and that attempt."""
    web = processes.add(WebProcess())
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
    off_the_loop(attempt_finish, run=run, reply_text="Hello world, all done.")

    processes.add(WebProcess(port=web.port))
    expect(page.locator("[data-live-indicator]")).to_have_text("live", timeout=15_000)
    exchange = page.locator(f"#exchange-{message.pk}")
    expect(exchange.locator(".bubble.assistant.markdown")).to_have_text("Hello world, all done.")
    expect(exchange.locator(".state")).to_have_text(re.compile("Done"))
    assert page.evaluate("window.__sameDocument") is True  # caught up without a reload
