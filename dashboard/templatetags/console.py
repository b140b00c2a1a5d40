from __future__ import annotations

from datetime import timedelta

from django import template

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
