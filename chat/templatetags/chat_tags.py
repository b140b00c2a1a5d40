from django import template
from django.utils.safestring import SafeString, mark_safe

from chat.rendering import markdown_to_safe_html
from continuity.delivery.alerts import alerts_reach_someone

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    return mark_safe(markdown_to_safe_html(text))  # noqa: S308  (sanitized by nh3)


@register.simple_tag
def staff_are_mailed() -> bool:
    return alerts_reach_someone()
