"""A reply shows the same while it streams as once it is stored: the page renders the text so
far with marked, the server renders the stored reply with markdown-it, and for the same text
both must give a person the same visible words, in the same order."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import Page, expect

from chat.rendering import markdown_to_safe_html
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.live.events import publish_reply_chunk
from tests.helpers.browser import log_in, off_the_loop
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What replies hold: each construct of CommonMark and of the GFM extensions a model writes.
SAMPLES = {
    "headings": "# Plan\n\n## Step one\n\nText under it.",
    "emphasis": "Some *emphasis*, some **strong**, some ***both*** and a snake_case_name.",
    "strikethrough": "This is ~~wrong~~ right.",
    "lists": "1. First\n2. Second\n   - nested\n   - more\n3. Third\n\n- a\n- b",
    "task list": "- [ ] to do\n- [x] done",
    "code": "Run `make test`, then:\n\n```python\nprint('hi')  # <b>\n```\n\n```\nplain\n```",
    "quote": "> Quoted\n> lines\n\nAfter.",
    "table": "| Name | Score |\n| --- | ---: |\n| Ada | 3 |\n| Bob | 10 |",
    "links": "See [the docs](https://docs.python.org/3/) or https://example.com/page.",
    "image": "![a chart](https://example.com/chart.png)",
    "line breaks": "One line\nnext line\n\nNew paragraph.",
    "raw html": "Keep <b>this</b> and <script>that</script> as text.",
    "rule and escapes": "Above\n\n---\n\n\\*not emphasis\\* &amp; 1 < 2",
}

VISIBLE = "(element) => element.innerText.replace(/\\s+/g, ' ').trim()"


def within(condition, seconds: float) -> bool:
    """Whether `condition` held within `seconds`."""
    try:
        wait_for(condition, timeout=seconds, what="")
    except AssertionError:
        return False
    return True


def streamed_and_stored(page: Page, web, owner, text: str) -> tuple[str, str]:
    """The visible words of `text` as the page shows it streaming, and as the server renders
    it once stored (in the same page, so that both are read the same way)."""
    chat = ConversationFactory(owner=owner)
    message = message_accept(conversation=chat, text="Show me", client_id=uuid.uuid4())
    run = attempt_begin(conversation_id=chat.pk)
    page.goto(f"{web.url}/c/{chat.pk}/")
    expect(page.locator("[data-live-indicator]")).to_have_text("live")
    streaming = page.locator(f'[data-streaming][data-run="{run.pk}"]')
    expect(streaming).to_be_attached()
    raw = streaming.locator(".streamed")

    def arrived() -> bool:
        # Live updates are at most once: one sent before the page's socket joined is lost, and
        # sent again (the same chunk: the page keeps one per sequence number).
        off_the_loop(
            publish_reply_chunk,
            conversation_id=chat.pk,
            message_id=message.pk,
            run_id=run.pk,
            seq=1,
            text=text,
        )
        return within(lambda: raw.evaluate("(element) => element.textContent") == text, 1)

    wait_for(arrived, timeout=20, what="the chunk to reach the page")
    streamed = streaming.locator(".streamed-html")
    expect(streamed).to_have_text(re.compile(r"\S"))  # rendered, in the frame after the chunk
    stored = page.evaluate(
        """(html) => {
            const stored = document.createElement("div");
            stored.className = "bubble assistant markdown";
            stored.innerHTML = html;
            document.body.append(stored);
            const shown = stored.innerText.replace(/\\s+/g, " ").trim();
            stored.remove();
            return shown;
        }""",
        markdown_to_safe_html(text),
    )
    return streamed.evaluate(VISIBLE), stored


def test_each_construct_reads_the_same_streaming_and_stored(page: Page, web):
    user = UserFactory()
    log_in(page, web, user.username)
    shown = {name: streamed_and_stored(page, web, user, text) for name, text in SAMPLES.items()}
    differences = {name: pair for name, pair in shown.items() if pair[0] != pair[1]}
    assert not differences, differences
