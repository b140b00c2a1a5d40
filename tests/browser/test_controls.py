"""Per-reply controls in a real browser: Stop while a reply streams, Retry a failed message."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from continuity.models import Message, Run
from tests.helpers.browser import log_in
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess, WorkerProcess
from tests.helpers.promise import LONG_REPLY
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def site_started(processes) -> WebProcess:
    # A reply long enough to be seen streaming and stopped, however late the page's socket
    # joins on a loaded machine.
    processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.3"))
    return processes.add(WebProcess())


@pytest.fixture
def site(processes):
    return site_started(processes)


def test_stop_keeps_the_partial_reply_and_marks_it(page: Page, site):
    UserFactory(username="ann")
    log_in(page, site, "ann")
    page.get_by_label("Message").fill(LONG_REPLY)
    # The button, not Enter: Enter sends only once the page's script has bound it, and a
    # loaded machine pressed it before that (the text stayed in the composer, unsent).
    page.get_by_role("button", name="Send").click()
    # The first token follows a new conversation, a drain and a plan: on a loaded machine,
    # more than the default 5 s.
    expect(page.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=15_000)
    page.get_by_role("button", name="Stop").click()
    expect(page.locator("[data-stopped]")).to_contain_text("Stopped: this reply was cut short")
    expect(page.get_by_role("button", name="Stop")).to_have_count(0)
    message = Message.objects.get(text=LONG_REPLY)
    reply = wait_for(
        lambda: Message.objects.filter(reply_to=message).first(), timeout=10, what="the reply"
    )
    assert reply.stopped and reply.text
    assert list(Run.objects.filter(message=message).values_list("state", flat=True)) == ["stopped"]
    page.reload()
    expect(page.locator("[data-stopped]")).to_have_count(1)


def test_retry_asks_a_failed_message_again(page: Page, processes):
    owner = UserFactory(username="bea")
    chat = ConversationFactory(owner=owner, title="Retry me")
    # Dead-lettered before any worker runs: a worker would answer the message first.
    dead_letter = dead_letter_make(chat, "My name is Bea")
    site = site_started(processes)
    log_in(page, site, "bea")
    page.goto(f"{site.url}/c/{chat.pk}/")
    page.get_by_role("button", name="Retry").click()
    expect(page.locator('[data-outcome="retried"]')).to_be_visible()
    expect(page.locator(".bubble.assistant.markdown")).to_contain_text("Nice to meet you, Bea")
    wait_for(
        lambda: Message.objects.get(reasked_from=dead_letter.message_id).state == "done",
        timeout=10,
        what="the re-ask to be answered",
    )


def test_escape_stops_the_reply_being_written(page: Page, site):
    UserFactory(username="cid")
    log_in(page, site, "cid")
    page.get_by_label("Message").fill(LONG_REPLY)
    # The button, not Enter: Enter sends only once the page's script has bound it, and a
    # loaded machine pressed it before that (the text stayed in the composer, unsent).
    page.get_by_role("button", name="Send").click()
    # The first token follows a new conversation, a drain and a plan: on a loaded machine,
    # more than the default 5 s.
    expect(page.locator("[data-streaming] .streamed")).not_to_be_empty(timeout=15_000)
    page.keyboard.press("Escape")
    expect(page.locator("[data-stopped]")).to_be_visible()
    message = Message.objects.get(text=LONG_REPLY)
    assert wait_for(
        lambda: Message.objects.filter(reply_to=message, stopped=True).exists(),
        timeout=10,
        what="a stopped reply",
    )
