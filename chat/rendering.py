"""Markdown for assistant replies: rendered by markdown-it (raw HTML off), then sanitized by nh3.

Fenced code that names a language Pygments knows is highlighted on the server, as spans with
CSS classes (static/chat/pygments.css colours them in both themes), never inline styles: the
Content-Security-Policy forbids those."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

from continuity.tools import when_said

ALLOWED_URL_SCHEMES = {"http", "https", "mailto"}
# No <img>: a browser fetches an image without asking, so a prompt-injected reply could leak
# the conversation through an image URL. Images become ordinary links, which need a click.
ALLOWED_TAGS = nh3.ALLOWED_TAGS - {"img"}
ALLOWED_ATTRIBUTES = {**nh3.ALLOWED_ATTRIBUTES, "pre": {"data-language"}}
# Only Pygments' own token classes survive sanitizing, so a reply cannot borrow the page's
# classes (e.g. to dress up as a notice from the system).
ALLOWED_CLASSES = {"pre": {"highlight"}, "span": {c for c in STANDARD_TYPES.values() if c}}

_formatter = HtmlFormatter(nowrap=True)


def _highlight(code: str, language: str, _attributes: str) -> str:
    """Pygments HTML for a fence whose language it knows; "" lets markdown-it escape the code."""
    if not language:
        return ""
    try:
        lexer = get_lexer_by_name(language)
    except ClassNotFound:
        return ""
    spans = highlight(code, lexer, _formatter)
    return (
        f'<pre class="highlight" data-language="{escapeHtml(lexer.name)}">'
        f"<code>{spans}</code></pre>"
    )


# The GFM extensions the page's own renderer (marked, while a reply streams) applies too:
# tables and strikethrough (tests/browser/test_markdown_parity.py).
_markdown = MarkdownIt(
    "commonmark", {"html": False, "breaks": True, "highlight": _highlight}
).enable(["table", "strikethrough"])


def _image_as_link(self, tokens, idx, options, env) -> str:
    token = tokens[idx]
    src = escapeHtml(str(token.attrGet("src") or ""))
    label = escapeHtml(self.renderInlineAsText(token.children or [], options, env)) or src
    return f'<a href="{src}">{label}</a>'


_markdown.add_render_rule("image", _image_as_link)


def markdown_to_safe_html(text: str) -> str:
    return nh3.clean(
        _markdown.render(text),
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        allowed_classes=ALLOWED_CLASSES,
        url_schemes=ALLOWED_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )


def markdown_closed(text: str) -> str:
    """A reply cut short mid-Markdown (stopped, or at the length limit), closed as it was
    opening: an open code fence, inline code or bold would otherwise show its raw marks, or
    swallow the rest of the page's formatting."""
    closed = text.rstrip()
    if closed.count("```") % 2:
        return f"{closed}\n```"
    prose = re.sub(r"```.*?```", "", closed, flags=re.DOTALL)
    if prose.count("`") % 2:
        return f"{closed}`"
    if re.sub(r"`[^`]*`", "", prose).count("**") % 2:
        return f"{closed}**"
    return closed


MARKDOWN_MARKS = [
    (re.compile(r"\[([^\]]*)\]\([^)]*\)"), r"\1"),  # a link: its text
    (re.compile(r"^\s{0,3}(?:#{1,6}|>|[-*+]|\d+\.)\s+", re.MULTILINE), ""),  # line marks
    (re.compile(r"```\w*|`|\*\*|__|~~"), ""),  # code, bold, strikethrough
    (re.compile(r"(?<![\w*])\*(?=\S)|(?<=\S)\*(?![\w*])"), ""),  # emphasis
]


def markdown_plain(text: str) -> str:
    """Markdown as the words a reader sees, on one line: for search results."""
    for pattern, replacement in MARKDOWN_MARKS:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


FACT_LABELS = {
    "name": "Your name",
    "goal": "Your goal",
    "likes": "What you like",
    "note": "What you asked me to remember",
}


def fact_label(key: str) -> str:
    """A remembered fact's key as the person reads it."""
    return FACT_LABELS.get(key, key.replace("_", " ").capitalize())


def reminder_when(reminder) -> str:
    """A reminder's time in the zone its owner set it in, said as such."""
    return when_said(reminder.due_at, ZoneInfo(reminder.time_zone or "UTC"))
