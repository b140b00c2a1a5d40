"""Every URL pattern of the project opens for staff, with data present, on PostgreSQL and on
SQLite (the SQLite lane runs this module again): pages, their htmx partials, /metrics and the
admin. A new pattern must either open with 200 or be listed below with the status it answers
a GET with, and why."""

from __future__ import annotations

import re
import uuid

import pytest
from axes.models import AccessFailureLog, AccessLog
from django.contrib import admin
from django.contrib.auth.models import Group
from django.contrib.auth.tokens import default_token_generator
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from continuity.actions import alert_acknowledge, conversation_pause
from continuity.context.compaction import summary_write
from continuity.context.handoffs import handoff_latest
from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import drain_conversation
from continuity.models import (
    Alert,
    Conversation,
    DeadLetter,
    McpServer,
    MemoryFact,
    Message,
    Recovery,
    ToolCall,
    Worker,
)
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import UserFactory

pytestmark = pytest.mark.django_db

# Patterns that are not pages, with what a GET answers and why. Their POSTs are tested with
# the views they belong to, which the SQLite lane runs too.
ACTION = 405  # POST only: a change, never made by following a link
NOT_PAGES = {
    "c/new/": ACTION,
    "c/<int:pk>/messages/": ACTION,
    "c/<int:pk>/retry-now/": ACTION,
    "c/<int:pk>/messages/<int:message_pk>/stop/": ACTION,
    "c/<int:pk>/messages/<int:message_pk>/retry/": ACTION,
    "c/<int:pk>/messages/<int:message_pk>/edit/": ACTION,
    "c/<int:pk>/messages/<int:message_pk>/regenerate/": ACTION,
    "c/<int:pk>/messages/<int:message_pk>/continue/": ACTION,
    "c/<int:pk>/messages/<int:message_pk>/show/": ACTION,
    "c/<int:pk>/rename/": ACTION,
    "c/<int:pk>/brain/": ACTION,
    "c/<int:pk>/archive/": ACTION,
    "c/<int:pk>/recoveries/<int:recovery_pk>/correct/": ACTION,
    "c/<int:pk>/notes/correct/": ACTION,
    "c/<int:pk>/tool-calls/<int:call_pk>/decide/": ACTION,
    "c/<int:pk>/tool-calls/<int:call_pk>/answer/": ACTION,
    "c/<int:pk>/notes/forget/": ACTION,
    "memory/<int:pk>/edit/": ACTION,
    "memory/<int:pk>/delete/": ACTION,
    "reminders/<int:pk>/cancel/": ACTION,
    "dashboard/dead-letters/bulk/": ACTION,
    "dashboard/dead-letters/<int:pk>/retry/": ACTION,
    "dashboard/dead-letters/<int:pk>/edit/": ACTION,
    "dashboard/dead-letters/<int:pk>/discard/": ACTION,
    "dashboard/conversations/<int:pk>/resume/": ACTION,
    "dashboard/conversations/<int:pk>/retry-now/": ACTION,
    "dashboard/conversations/<int:pk>/pause/": ACTION,
    "dashboard/conversations/<int:pk>/take-over/": ACTION,
    "dashboard/conversations/<int:pk>/reply/": ACTION,
    "dashboard/conversations/<int:pk>/hand-back/": ACTION,
    "dashboard/conversations/<int:pk>/tool-calls/<int:call_pk>/answer/": ACTION,
    # A taken-over conversation's thread, which its page polls; of any other conversation, an
    # empty answer with HX-Refresh (handed back meanwhile: HttpResponseClientRefresh).
    # tests/continuity/test_takeover.py opens it.
    "dashboard/conversations/<int:pk>/thread/": 200,
    # A lookup: a message id to its timeline, or back to the overview with a warning.
    "dashboard/messages/": 302,
    # The site's icon, for browsers and probes that read no page's icon link.
    "favicon.ico": 302,
    "dashboard/alerts/<int:pk>/acknowledge/": ACTION,
    "accounts/logout/": ACTION,
    "admin/logout/": ACTION,
    # Signed in, the login pages send on to the chat and to the admin's index.
    "accounts/login/": 302,
    "admin/login/": 302,
    # The admin's shortcut to an object's change page, and to the site's view of it.
    "admin/<app>/<model>/<path:object_id>/": 302,
    # The admin's "view on site": no model here has a page of its own on the site.
    "admin/r/<path:content_type_id>/<path:object_id>/": 404,
    # The admin's answer to any other address under it.
    "admin/(?P<url>.*)$": 404,
    # A valid reset link: Django keeps its token in the session and sends on to the form's own
    # address, so that the token does not stay in the page's address (and its Referer).
    "accounts/password/reset/<uidb64>/<token>/": 302,
    # A lookup for autocomplete widgets: refused without the widget's field parameters.
    "admin/autocomplete/": 403,
}


def routes(resolver: URLResolver | None = None, prefix: str = ""):
    """(route, pattern) for every URL pattern, with the routes of included URLconfs joined."""
    for pattern in (resolver or get_resolver()).url_patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from routes(pattern, route)
        else:
            assert isinstance(pattern, URLPattern)
            yield route, pattern


# Parameters a page needs, and what it answers without htmx when the answer differs: the older
# exchanges are a partial, and a plain link to them opens the conversation at that point.
QUERIES = {"c/<int:pk>/exchanges/": "?before={message_pk}"}
WITHOUT_HTMX = {"c/<int:pk>/exchanges/": 302}

# Whose id a non-admin route's `pk` is, by the route's beginning.
PK_OWNERS = [
    ("memory/", "fact"),
    ("dashboard/dead-letters/", "dead_letter"),
    ("dashboard/alerts/", "alert"),
    ("dashboard/runs/", "run"),
    ("dashboard/messages/", "message"),
    ("dashboard/workers/", "worker"),
    ("", "conversation"),
]


def admin_model(route: str):
    """The model whose admin a route belongs to, if it does."""
    models = {(m._meta.app_label, m._meta.model_name): m for m in admin.site._registry}
    match = re.match(r"^admin/(\w+)/(\w+)/", route)
    return match and models.get(match.groups())


def admin_model_route(route: str) -> str:
    """The admin's per-model routes, with the model written generically."""
    return (
        re.sub(r"^admin/\w+/\w+/", "admin/<app>/<model>/", route) if admin_model(route) else route
    )


@pytest.fixture
def world(client):
    """A staff member's conversation with a tool call, a crash and its recovery, a summary, a
    dead letter, a pause and its alert, remembered facts; and a worker, a group, a handled alert
    and an MCP server."""
    staff = UserFactory(is_staff=True, is_superuser=True, username="opal")
    chat = Conversation.objects.create(owner=staff, title="Sourdough")

    def send(text: str) -> Message:
        message = message_accept(conversation=chat, text=text, client_id=uuid.uuid4())
        drain_conversation(conversation_id=chat.pk)
        return message

    first = send("Hi, my name is Ada and my goal is to bake bread")
    send("Remember that I like rye")  # a tool call
    McpServer.objects.create(name="ledger", url="http://127.0.0.1:9/mcp", enabled=False)
    asked = message_accept(conversation=chat, text="What's my name?", client_id=uuid.uuid4())
    crashed = attempt_begin(conversation_id=chat.pk)
    attempt_end(run_id=crashed.pk, state="crashed", error="Heartbeat stopped", detected_by="x")
    Conversation.objects.filter(pk=chat.pk).update(retry_at=None)  # skip the backoff
    drain_conversation(conversation_id=chat.pk)
    summary_write(conversation_id=chat.pk, covers_through_id=first.pk, text="Ada bakes bread.")
    dead_letter_make(chat)
    alert = conversation_pause(conversation=chat, reason="Three crashes within an hour")
    handled = Alert.objects.create(kind="conversation_paused", conversation=chat, text="earlier")
    alert_acknowledge(alert=handled, by=staff, reason="looked at it")
    now = timezone.now()
    worker = Worker.objects.create(
        name="w1@host", hostname="host", pid=1, started_at=now, last_seen_at=now
    )
    Group.objects.create(name="support")
    client.force_login(staff)
    Client().post("/accounts/login/", {"username": "opal", "password": "wrong"})  # axes' rows
    for log in (AccessLog, AccessFailureLog):  # kept only where settings turn them on
        log.objects.create(username="opal", ip_address="127.0.0.1", user_agent="test")
    return {
        "conversation": chat,
        "message": asked,
        "recovery": Recovery.objects.get(message=asked),
        "tool_call": ToolCall.objects.get(),
        "fact": MemoryFact.objects.filter(owner=staff).first(),
        "dead_letter": DeadLetter.objects.get(conversation=chat),
        "alert": alert,
        "handoff": handoff_latest(conversation_id=chat.pk),
        "run": crashed,
        "worker": worker,
    }


def path_of(route: str, world) -> str:
    """The route with each parameter filled from the world the test made."""
    owner = next(key for prefix, key in PK_OWNERS if route.startswith(prefix))
    values = {
        "pk": world[owner].pk,
        "message_pk": world["message"].pk,
        "recovery_pk": world["recovery"].pk,
        "call_pk": world["tool_call"].pk,
        "conversation_id": world["conversation"].pk,
        "content_type_id": ContentType.objects.get_for_model(Conversation).pk,
        "object_id": world["conversation"].pk,
        "app_label": "continuity",
        "action": "grow",  # a worker command's confirmation page
        "url": "no-such-page/",
        # A valid password reset link, of the staff member signed in.
        "uidb64": urlsafe_base64_encode(force_bytes(world["conversation"].owner_id)),
        "token": default_token_generator.make_token(world["conversation"].owner),
    }
    if model := admin_model(route):
        instance = model._default_manager.order_by("pk").first()
        assert instance is not None, f"the test made no {model.__name__} for {route}"
        values |= {"object_id": instance.pk, "pk": instance.pk, "id": instance.pk}
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", re.sub(r"\^|\$|\\Z", "", route))
    path += QUERIES.get(route, "")
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>|\{(\w+)\}", lambda m: str(values[m[1] or m[2]]), path)


def expected_status(route: str, *, htmx: bool, request) -> int:
    if not htmx and route in WITHOUT_HTMX:
        return WITHOUT_HTMX[route]
    if (model := admin_model(route)) and route.endswith(("/add/", "/delete/")):
        # Engine records are written by the engine only: their admin refuses adding or deleting.
        model_admin = admin.site._registry[model]
        allowed = (
            model_admin.has_add_permission(request)
            if route.endswith("/add/")
            else model_admin.has_delete_permission(request)
        )
        return 200 if allowed else 403
    return NOT_PAGES.get(route, NOT_PAGES.get(admin_model_route(route), 200))


def test_every_url_pattern_answers_staff_with_a_page(client, world, rf):
    request = rf.get("/")
    request.user = world["conversation"].owner
    wrong = []
    for route, _ in routes():
        path = path_of(route, world)
        for htmx in (False, True):
            expected = expected_status(route, htmx=htmx, request=request)
            status = client.get(path, headers={"HX-Request": "true"} if htmx else {}).status_code
            if status != expected:
                wrong.append(f"{path}{' (htmx)' if htmx else ''}: {status}, not {expected}")
    assert wrong == []
