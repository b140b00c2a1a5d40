"""Markdown for assistant replies: rendered by markdown-it (raw HTML off), then sanitized by nh3."""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt

_markdown = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table")

ALLOWED_URL_SCHEMES = {"http", "https", "mailto"}


def markdown_to_safe_html(text: str) -> str:
    return nh3.clean(
        _markdown.render(text),
        url_schemes=ALLOWED_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
