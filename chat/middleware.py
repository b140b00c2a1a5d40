"""A database outage answers 503 "try again" and loses no typed text, while a wrong statement
stays a 500 with its traceback; and a request's middleware runs in one thread."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from continuity.database.outages import database_unreachable

logger = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 3


class DatabaseUnavailableMiddleware:
    """Turns a database that cannot serve (refused, lost, a timeout on connect or on a lock)
    into 503 with Retry-After. The composer keeps the text and sends it again by itself with
    the same client id, so a retry that did get through before the outage returns the stored
    message instead of a second one. Any other database error is a bug: Django's 500, logged
    with its traceback."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception):
        if not database_unreachable(exception):
            return None
        logger.warning("Database unavailable (%s %s): %s", request.method, request.path, exception)
        # Rendered without the request: the session and the user live in the database too.
        response = HttpResponse(
            render_to_string("database_unavailable.html", {"seconds": RETRY_AFTER_SECONDS}),
            status=503,
        )
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


class SyncChainMiddleware:
    """Last in MIDDLEWARE, and sync only: it keeps a request's middleware in its thread.

    Under ASGI, Django builds the chain from an async handler, so every async-capable middleware
    runs async and calls each of its sync hooks through a hop from the event loop to the
    request's thread and back: sixteen hops for one page. With a sync-only middleware innermost,
    every middleware runs sync, in the request's thread, as the views do."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)
