from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()


@register.filter
def span(value: timedelta | None) -> str:
    """A duration the way people read one: "40 ms", "3.2 s", "5 min 3 s", "2 h 10 min"."""
    if value is None:
        return "–"
    seconds = max(0.0, value.total_seconds())
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


@register.simple_tag
def utc_time(at: datetime | str | None, precision: str = "seconds") -> SafeString | str:
    """A time in the console: UTC, as the console says once at its top, in one format
    ("2026-11-28 19:27:05"); the console's script shows it in the viewer's zone on request.
    Attempts stored in a dead letter hold their times as ISO text."""
    if not at:
        return "–"
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    at = at.astimezone(UTC) if timezone.is_aware(at) else at.replace(tzinfo=UTC)
    shown = f"{at:%Y-%m-%d %H:%M:%S}" if precision == "seconds" else f"{at:%Y-%m-%d %H:%M}"
    return format_html(
        '<time datetime="{}" data-utc-time="{}">{}</time>', at.isoformat(), precision, shown
    )
