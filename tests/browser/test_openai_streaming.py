"""A person watches a reply of the `openai` brain stream in, in headless Chromium: daphne, a
Celery worker and the fake OpenAI-compatible server, which sends one word every 0.15 s."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from devtools.fake_model import FakeOpenAI, reply_to, worker_settings
from tests.helpers.browser import log_in
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import ARTIFACTS, WebProcess, WorkerProcess

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTION = "Tell me how a reply gets from the model server to this page, one word at a time"
# Every text the streaming bubble shows, in order, from the first paint of each page.
RECORD_STREAMED_TEXT = """
window.__streamed = [];
new MutationObserver(() => {
  document.querySelectorAll(".bubble.assistant.streaming .streamed").forEach((el) => {
    const seen = window.__streamed;
    if (seen[seen.length - 1] !== el.textContent) seen.push(el.textContent);
  });
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


@pytest.fixture
def fake():
    server = FakeOpenAI(delay=0.15).start()
    yield server
    server.stop()


@pytest.fixture
def site(processes, fake) -> WebProcess:
    processes.add(WorkerProcess(**worker_settings(fake)))
    return processes.add(WebProcess())


def test_a_model_reply_grows_chunk_by_chunk_then_shows_once(page: Page, site, fake):
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    log_in(page, site, user.username)
    page.add_init_script(RECORD_STREAMED_TEXT)
    page.goto(f"{site.url}/c/{conversation.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")

    page.get_by_label("Message").fill(QUESTION)
    page.get_by_label("Message").press("Enter")
    streamed = page.locator(".bubble.assistant.streaming .streamed")
    expect(streamed).to_contain_text("You said:", timeout=20_000)
    expect(streamed).to_contain_text("model server", timeout=20_000)  # still growing
    final = page.locator(".bubble.assistant.markdown")
    expect(final).to_have_text(reply_to(QUESTION), timeout=30_000)

    expect(page.locator(".bubble.assistant")).to_have_count(1)
    expect(page.locator(".bubble.assistant.streaming")).to_have_count(0)
    shown = [" ".join(text.split()) for text in page.evaluate("window.__streamed")]
    partial = [text for text in shown if text and text != reply_to(QUESTION)]
    assert len(set(partial)) >= 2, shown
    # Each text the person saw was the start of the reply, and each was longer than the last.
    assert all(reply_to(QUESTION).startswith(text) for text in partial), partial
    assert [len(text) for text in partial] == sorted({len(text) for text in partial}), partial
    assert fake.chat_requests() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / "openai-streaming.png", full_page=True)
