"""How django-axes sees a login client, and what it answers once that client is locked out."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import add_never_cache_headers


def client_ip(request: HttpRequest) -> str | None:
    """The address the nearest trusted proxy saw, else the socket's peer.

    Each proxy appends the address it received the request from, so with N trusted proxies the
    client is the N-th entry from the right; entries further left are whatever the client sent.
    """
    count = settings.TRUSTED_PROXY_COUNT
    forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    forwarded = [a for a in forwarded if a]
    if count and len(forwarded) >= count:
        return forwarded[-count]
    return request.META.get("REMOTE_ADDR")


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None
) -> HttpResponse:
    minutes = round(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    response = render(
        request,
        "registration/locked_out.html",
        {"cooloff_minutes": minutes, "failure_limit": settings.AXES_FAILURE_LIMIT},
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    add_never_cache_headers(response)
    return response
