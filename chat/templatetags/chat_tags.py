from django import template
from django.conf import settings
from django.utils.safestring import SafeString, mark_safe

from chat.rendering import markdown_to_safe_html

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    return mark_safe(markdown_to_safe_html(text))  # noqa: S308  (sanitized by nh3)


@register.simple_tag
def staff_are_mailed() -> bool:
    """Whether a failure reaches staff by mail (ADMINS set): only then may the page say that
    staff were notified; otherwise it is set aside for them to find in the console."""
    return bool(settings.ADMINS)
