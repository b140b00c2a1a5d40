from __future__ import annotations

import uuid
from datetime import datetime

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from chat.rendering import fact_label, markdown_closed, markdown_plain, markdown_to_safe_html
from continuity.actions import support_name as takeover_support_name
from continuity.delivery import alerts_reach_someone

register = template.Library()
register.filter("fact_label", fact_label)
register.filter("markdown_plain", markdown_plain)


@register.filter
def markdown(text: str) -> SafeString:
    return mark_safe(markdown_to_safe_html(text))  # noqa: S308  (sanitized by nh3)


@register.filter
def unfinished_markdown(text: str) -> SafeString:
    """A reply cut short, its open Markdown closed (`markdown_closed`), as HTML."""
    return markdown(markdown_closed(text))


@register.simple_tag
def staff_are_mailed() -> bool:
    return alerts_reach_someone()


@register.simple_tag
def local_time(at: datetime) -> SafeString:
    """When a message was written, in the server's time zone (named); chat.js rewrites the
    text into the reader's own time zone and keeps the full date in the title."""
    at = timezone.localtime(at)
    return format_html(
        '<time datetime="{}" title="{}" data-local-time>{}</time>',
        at.isoformat(),
        date_format(at, "j F Y, H:i e"),
        date_format(at, "j M Y, H:i e"),
    )


@register.simple_tag
def new_client_id() -> str:
    """A client id for a form that adds a message: a resubmitted form finds what it added."""
    return str(uuid.uuid4())


@register.simple_tag
def support_name(user) -> str:
    """A person from support as the user sees them; an account since deleted is "Someone"."""
    return takeover_support_name(user) if user is not None else "Someone"


@register.simple_tag
def posts_to(target: str, *args) -> SafeString:
    """A form's method, action and hx-post, naming its URL once: the form posts with htmx, and
    as a plain form without JavaScript. `target`: a URL, or a URL pattern's name with `args`."""
    url = target if target.startswith("/") else reverse(target, args=args)
    return format_html('method="post" action="{0}" hx-post="{0}"', url)
