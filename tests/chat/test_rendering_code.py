"""Code in replies: highlighted on the server by Pygments with classes (no inline style, which
the CSP forbids), escaped when the language is unknown, and sanitized like everything else."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from chat.rendering import markdown_to_safe_html
from continuity.models import Message
from tests.helpers.factories import MessageFactory
from tests.helpers.rendering import active_content

PYTHON = '```python\nimport os\n\ndef greet(name):\n    return f"<b>{name}</b>"  # hi\n```\n'


def test_a_fenced_python_block_is_highlighted_with_classes_only():
    html = markdown_to_safe_html(PYTHON)
    assert html.startswith('<pre class="highlight" data-language="Python"><code>')
    assert '<span class="kn">import</span>' in html
    assert '<span class="k">def</span>' in html
    assert '<span class="c1"># hi</span>' in html
    assert "style=" not in html
    assert "&lt;b&gt;" in html and "<b>" not in html  # the code's own markup stays text


def test_every_class_left_is_a_pygments_token_class():
    html = markdown_to_safe_html(PYTHON + "\n```js\nconst a = 1; // x\n```\n")
    classes = set(re.findall(r'class="([^"]*)"', html))
    assert classes >= {"highlight", "kn", "k", "nf"}
    assert all(re.fullmatch(r"[a-z0-9]{1,4}|highlight", c) for c in classes), classes


@pytest.mark.parametrize("fence", ["```nosuchlanguage", "```", "~~~"])
def test_code_of_an_unknown_or_unnamed_language_is_escaped_plain_code(fence):
    closing = fence[:3]
    html = markdown_to_safe_html(f"{fence}\n<script>alert(1)</script> & x < y\n{closing}\n")
    assert html == (
        "<pre><code>&lt;script&gt;alert(1)&lt;/script&gt; &amp; x &lt; y\n</code></pre>\n"
    )


@pytest.mark.parametrize(
    "payload",
    [
        '```python" onmouseover="alert(1)\nx = 1\n```',
        "```python\n</code></pre><script>alert(1)</script>\n```",
        '```html\n<img src=x onerror="alert(1)">\n```',
        '<pre class="highlight"><span class="k" style="color:red">x</span></pre>',
        "**bold** <script>alert(1)</script>\n\n```python\nx = 1\n```",
    ],
)
def test_html_around_and_inside_code_stays_inert(payload):
    html = markdown_to_safe_html(payload)
    assert active_content(html) == []
    assert "<script" not in html and "<img" not in html


def test_a_reply_s_page_has_the_highlighting_and_its_stylesheet(db, owner_client, conversation):
    question = MessageFactory(conversation=conversation, text="Show me", state="done")
    Message.objects.create(
        conversation=conversation, role="assistant", text=PYTHON, state="done", reply_to=question
    )
    html = owner_client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert '<span class="kn">import</span>' in html
    assert "chat/pygments.css" in html
