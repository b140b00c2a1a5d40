"""Markdown for assistant replies: rendered by markdown-it (raw HTML off), then sanitized by nh3."""

from __future__ import annotations

import nh3
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

_markdown = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table")

ALLOWED_URL_SCHEMES = {"http", "https", "mailto"}
# No <img>: a browser fetches an image without asking, so a prompt-injected reply could leak
# the conversation through an image URL. Images become ordinary links, which need a click.
ALLOWED_TAGS = nh3.ALLOWED_TAGS - {"img"}


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
        url_schemes=ALLOWED_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
