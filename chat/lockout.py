"""Login lockout: how django-axes sees a login client, the lock on an address that fails for
many usernames (password spraying), and what a locked-out client is answered.

Axes locks the combination of a username and an address: someone who forgets their password
locks only themselves, only from where they are, and not everyone behind the same office or
school address, nor themselves from everywhere else. An address that fails for many usernames
is locked too, at a much higher threshold, counted from the same rows axes keeps."""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import F, Sum, Value
from django.db.models.functions import Least
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
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


def address_failures(address: str | None) -> int:
    """Failed logins from this address within the cool-off, for any usernames, each username
    counted up to its own limit: one person who keeps trying (a mail client with an old
    password) is locked alone, and does not lock the address for everyone."""
    since = timezone.now() - settings.AXES_COOLOFF_TIME
    attempts = AccessAttempt.objects.filter(ip_address=address, attempt_time__gte=since)
    per_username = Least(F("failures_since_start"), Value(settings.AXES_FAILURE_LIMIT))
    return attempts.aggregate(failures=Sum(per_username))["failures"] or 0


def address_locked(request: HttpRequest, limit: int) -> bool:
    return address_failures(client_ip(request)) >= limit


class LoginLockoutBackend(AxesStandaloneBackend):
    """Axes' check of the username at this address, and before it the address's own limit."""

    def authenticate(self, request: HttpRequest, username=None, password=None, **kwargs):
        limit = settings.LOGIN_ADDRESS_FAILURE_LIMIT
        if request is not None and settings.AXES_ENABLED and address_locked(request, limit):
            request.axes_locked_out = True  # AxesMiddleware answers with lockout_response
            request.address_locked_out = True
            raise AxesBackendPermissionDenied("Too many failed logins from this address")
        return super().authenticate(request, username, password, **kwargs)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None
) -> HttpResponse:
    minutes = round(settings.AXES_COOLOFF_TIME.total_seconds() / 60)
    response = render(
        request,
        "registration/locked_out.html",
        {
            "cooloff_minutes": minutes,
            "failure_limit": settings.AXES_FAILURE_LIMIT,
            "address_limit": settings.LOGIN_ADDRESS_FAILURE_LIMIT,
            "address_locked": getattr(request, "address_locked_out", False),
        },
        status=429,
    )
    response["Retry-After"] = str(minutes * 60)
    add_never_cache_headers(response)
    return response
