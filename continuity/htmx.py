"""The request type of a view that reads `request.htmx` (django-htmx's middleware sets it), as
django-htmx's documentation recommends for type checkers."""

from __future__ import annotations

from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
