"""Replies are Markdown rendered and sanitized; user text is escaped. Hostile input stays inert."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from django.utils.html import escape

from chat.rendering import markdown_to_safe_html
from continuity.models import Message
from tests.helpers.factories import MessageFactory
from tests.helpers.rendering import active_content

pytestmark = pytest.mark.django_db

XSS_CORPUS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "![x](javascript:alert(1))",
    '<a href="javascript:alert(1)">x</a>',
    "<svg onload=alert(1)>",
    "<iframe src=//evil.example></iframe>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "**bold** <b onmouseover=alert(1)>hover</b>",
    "`<script>alert(1)</script>`",
    "<<script>script>alert(1)<</script>/script>",
]


@pytest.mark.parametrize("payload", XSS_CORPUS)
def test_reply_markdown_renders_hostile_input_inert(payload):
    assert active_content(markdown_to_safe_html(payload)) == []


def test_markdown_still_renders_formatting_and_safe_links():
    html = markdown_to_safe_html("**Plan**\n\n1. one\n2. [docs](https://example.org)")
    assert "<strong>Plan</strong>" in html and "<ol>" in html
    assert 'href="https://example.org"' in html and 'rel="noopener noreferrer nofollow"' in html


@pytest.mark.parametrize("payload", XSS_CORPUS)
def test_conversation_page_escapes_user_text_and_sanitizes_replies(
    owner_client, conversation, payload
):
    question = MessageFactory(conversation=conversation, text=payload, state="done")
    Message.objects.create(
        conversation=conversation, role="assistant", text=payload, state="done", reply_to=question
    )
    html = owner_client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    exchange = html[html.index(f'id="exchange-{question.pk}"') :]
    exchange = exchange[: exchange.index("</article>")]
    assert active_content(exchange, own_forms=f"/c/{conversation.pk}/messages/") == []
    assert escape(payload) in exchange  # the user's text is shown, as text


@pytest.mark.parametrize(
    "payload",
    [
        "![t](http://evil.example/pixel.png)",
        '![t](https://evil.example/pixel.png "title")',
        "![t][pixel]\n\n[pixel]: http://evil.example/pixel.png",
        '<img src="http://evil.example/pixel.png">',
        "![t](//evil.example/pixel.png)",
    ],
)
def test_reply_images_never_load_from_another_origin(payload):
    """A prompt-injected image URL would leak data without a click; images become links."""
    html = markdown_to_safe_html(payload)
    assert "<img" not in html
    assert not re.search(r"<[^>]*\ssrc=", html)  # no element fetches anything by itself


def test_a_reply_image_becomes_a_link_with_its_alt_text():
    html = markdown_to_safe_html("![a pixel](http://evil.example/pixel.png)")
    assert html.strip() == (
        '<p><a href="http://evil.example/pixel.png" rel="noopener noreferrer nofollow">'
        "a pixel</a></p>"
    )


@pytest.mark.parametrize(
    ("cut_short", "closed"),
    [
        ("Here is **bold te", "Here is **bold te**"),
        ("Run `make te", "Run `make te`"),
        ("Code:\n```python\ndef add(a, b):", "Code:\n```python\ndef add(a, b):\n```"),
        ("Done: **a** and `b` ", "Done: **a** and `b`"),
        ("Use `**` for bold", "Use `**` for bold"),
    ],
)
def test_markdown_cut_short_is_closed_as_it_was_opening(cut_short, closed):
    from chat.rendering import markdown_closed

    assert markdown_closed(cut_short) == closed
