from __future__ import annotations

import logging
import time
import uuid
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from continuity.actions import (
    conversation_retry_now,
    conversation_zone_note,
    dead_letter_retry,
    reply_stop,
    tool_calls_stop,
)
from continuity.context import message_too_long
from continuity.database.outages import database_unreachable
from continuity.delivery import conversation_start, message_accept
from continuity.errors import ClientIdReused, InvalidTransition
from continuity.htmx import HtmxHttpRequest
from continuity.models import Conversation, DeadLetter, Message
from continuity.selectors import (
    SIDEBAR_SIZE,
    conversation_status,
    conversations_of,
    exchange_as_accepted,
    exchanges_page,
    newest_message_id,
    sidebar_conversations_of,
    sidebar_shown,
)

from .forms import BrainForm, MessageForm, NewConversationForm, SignupForm
from .throttles import rate_limit_wait

PAGE = "chat/conversation.html"
logger = logging.getLogger(__name__)
TOO_FAST = {
    "send": "You are sending messages faster than the assistant can answer. "
    "Wait {seconds} s, then send again: your text is still here.",
    "new_conversation": "You have started many conversations in a short time. "
    "Wait {seconds} s, then send again: your text is still here.",
}


def login_required_or_401(view):
    """Pages send anonymous users to the login page; an htmx request gets 401 instead, so the
    page keeps the typed text and says what happened rather than swapping in a login form."""
    page_view = login_required(view)

    @wraps(view)
    def wrapper(request: HtmxHttpRequest, *args, **kwargs) -> HttpResponse:
        if request.htmx and not request.user.is_authenticated:
            return HttpResponse("Your session has ended; sign in again.", status=401)
        return page_view(request, *args, **kwargs)

    return wrapper


def made_again_through_outages(view):
    """A send that meets a database that cannot serve (a restart or a failover ended its
    connection mid-request, or no connection comes) is made again, on a new connection, for up
    to CONTINUITY_SEND_OUTAGE_SECONDS; then the middleware answers 503 and the composer sends
    it again itself. Safe because a send is the same message however often it is made (its
    client id); only a send that ends within the time is answered. Outermost, so the session
    and the user, read from the database too, are read again."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        deadline = time.monotonic() + settings.CONTINUITY_SEND_OUTAGE_SECONDS
        pause = 0.25
        while True:
            try:
                return view(request, *args, **kwargs)
            except Exception as error:
                if not database_unreachable(error) or time.monotonic() + pause > deadline:
                    raise
                logger.warning("Database unavailable; %s made again: %s", request.path, error)
            connection.close()  # a broken connection is never used again
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    return wrapper


def own_conversation(request: HttpRequest, pk: int) -> Conversation:
    """The signed-in person's conversation, or 404: another person's looks like no conversation."""
    return get_object_or_404(conversations_of(owner=request.user), pk=pk)


def id_param(request: HttpRequest, name: str) -> int | None:
    value = request.GET.get(name, "")
    return int(value) if value.isdigit() else None


def page_context(request: HttpRequest, conversation: Conversation | None, form: MessageForm):
    sidebar = sidebar_conversations_of(owner=request.user)
    context = {
        "conversation": conversation,
        "conversations": sidebar_shown(conversations=sidebar[:SIDEBAR_SIZE]),
        "more_conversations": max(0, sidebar.count() - SIDEBAR_SIZE),
        "form": form,
    }
    if conversation is not None:
        if conversation.unread_at is not None:  # what came while its owner was away is read now
            Conversation.objects.filter(pk=conversation.pk).update(unread_at=None)
        # Read before the exchanges: the page then holds at least everything up to this id.
        context["synced_up_to"] = newest_message_id(conversation=conversation)
        context["resync_ms"] = round(settings.CONTINUITY_PAGE_RESYNC_SECONDS * 1000)
        # Newest first; `before` (the older-page link without script) and `since` (a search
        # result) open further back.
        context["page"] = exchanges_page(
            conversation=conversation,
            before=id_param(request, "before"),
            since=id_param(request, "since"),
        )
        context.update(conversation_status(conversation=conversation))
        context["brain_form"] = BrainForm(
            initial={"brain": conversation.brain or settings.CONTINUITY_BRAIN}
        )
    return context


def composer_invalid(
    request: HtmxHttpRequest,
    conversation: Conversation | None,
    form: MessageForm,
    status: int = 422,
):
    """The errors, with the user's text kept in the composer."""
    if request.htmx:
        return render(
            request,
            f"{PAGE}#composer_oob",
            {"conversation": conversation, "form": form},
            status=status,
        )
    return render(request, PAGE, page_context(request, conversation, form), status=status)


def composer_too_fast(
    request: HttpRequest, conversation: Conversation | None, form: MessageForm, action: str
) -> HttpResponse | None:
    """429 with the wait and the text kept when the user is over a rate limit, else None."""
    seconds = rate_limit_wait(action=action, who=request.user.pk)
    if not seconds:
        return None
    form.add_error("text", TOO_FAST[action].format(seconds=seconds))
    response = composer_invalid(request, conversation, form, status=429)
    response["Retry-After"] = str(seconds)
    return response


def composer_too_long(
    request: HttpRequest, conversation: Conversation | None, form: MessageForm, *, brain_name: str
) -> HttpResponse | None:
    """422 with the text kept when the brain's model could not hold the message at all."""
    if not (why := message_too_long(brain_name=brain_name, text=form.cleaned_data["text"])):
        return None
    form.add_error("text", why)
    return composer_invalid(request, conversation, form)


def composer_conflict(
    request: HttpRequest, conversation: Conversation | None, form: MessageForm, error: Exception
) -> HttpResponse:
    """409 for a known client id with other text: the text stays, under a new client id, so
    the next Enter sends it as a new message instead of being discarded as a resubmission."""
    form = type(form)({**form.data.dict(), "client_id": str(uuid.uuid4())})
    form.is_valid()
    form.add_error("text", str(error))
    return composer_invalid(request, conversation, form, status=409)


@never_cache
@require_http_methods(["GET", "POST"])
def signup_view(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        # Named because axes adds a second backend; a new account has no failures to count.
        login(request, form.save(), backend="django.contrib.auth.backends.ModelBackend")
        return redirect("chat:home")
    return render(
        request, "registration/signup.html", {"form": form}, status=422 if form.errors else 200
    )


@never_cache
@require_GET
@login_required
def home_view(request: HttpRequest) -> HttpResponse:
    return render(request, PAGE, page_context(request, None, NewConversationForm.blank()))


@never_cache
@require_POST
@made_again_through_outages
@login_required_or_401
def conversation_new_view(request: HtmxHttpRequest) -> HttpResponse:
    form = NewConversationForm(request.POST)
    if not form.is_valid():
        return composer_invalid(request, None, form)
    if refused := composer_too_fast(request, None, form, "new_conversation"):
        return refused
    if refused := composer_too_long(request, None, form, brain_name=form.cleaned_data["brain"]):
        return refused
    try:
        conversation = conversation_start(
            owner=request.user,
            text=form.cleaned_data["text"],
            client_id=form.cleaned_data["client_id"],
            brain=form.cleaned_data["brain"],
        )
    except ClientIdReused as error:
        return composer_conflict(request, None, form, error)
    conversation_zone_note(conversation=conversation, zone=form.cleaned_data["time_zone"])
    if request.htmx:
        return HttpResponseClientRedirect(conversation_url(conversation))
    return redirect(conversation_url(conversation))


@never_cache
@require_GET
@login_required
def conversation_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    return render(request, PAGE, page_context(request, conversation, MessageForm.blank()))


@never_cache
@require_POST
@made_again_through_outages
@login_required_or_401
def message_send_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    form = MessageForm(request.POST)
    if not form.is_valid():
        return composer_invalid(request, conversation, form)
    if refused := composer_too_fast(request, conversation, form, "send"):
        return refused
    if refused := composer_too_long(request, conversation, form, brain_name=conversation.brain):
        return refused
    try:
        message = message_accept(
            conversation=conversation,
            text=form.cleaned_data["text"],
            client_id=form.cleaned_data["client_id"],
        )
    except ClientIdReused as error:
        return composer_conflict(request, conversation, form, error)
    conversation_zone_note(conversation=conversation, zone=form.cleaned_data["time_zone"])
    if not request.htmx:
        return redirect(conversation_url(conversation))
    return render(
        request,
        f"{PAGE}#sent",
        {
            "conversation": conversation,
            "exchange": exchange_as_accepted(conversation=conversation, message=message),
            "form": MessageForm.blank(),
        },
    )


@never_cache
@require_POST
@login_required_or_401
def retry_now_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """*Retry now* while a retry waits out its backoff; refused (409) once there is none."""
    conversation = own_conversation(request, pk)
    try:
        conversation_retry_now(conversation=conversation)
        status = 200
    except InvalidTransition:
        status = 409  # paused, already running or no longer waiting: the status shows which
    if not request.htmx:
        return redirect(conversation_url(conversation))
    conversation.refresh_from_db()
    return render(
        request, f"{PAGE}#status", conversation_status(conversation=conversation), status=status
    )


@never_cache
@require_POST
@login_required_or_401
def reply_stop_view(request: HtmxHttpRequest, pk: int, message_pk: int) -> HttpResponse:
    """*Stop* while a reply is written, or while its tool calls wait for approval (denied): 204
    (the page learns the outcome over its websocket), or 409 when nothing is being written any
    more (finished, or not begun)."""
    conversation = own_conversation(request, pk)
    message = get_object_or_404(conversation.messages, pk=message_pk, role=Message.Role.USER)
    try:
        reply_stop(message=message)
        status = 204
    except InvalidTransition:
        status = 204 if tool_calls_stop(message=message) else 409
    if not request.htmx:
        return redirect(conversation_url(conversation))
    return focus_exchange(HttpResponse(status=status), message.pk)


@never_cache
@require_POST
@login_required_or_401
def message_retry_view(request: HtmxHttpRequest, pk: int, message_pk: int) -> HttpResponse:
    """*Retry* on the person's own message that could not be processed: it is asked again at
    the end of the conversation, as staff would (the dead letter records who and why)."""
    conversation = own_conversation(request, pk)
    message = get_object_or_404(
        conversation.messages, pk=message_pk, role=Message.Role.USER, state=Message.State.DEAD
    )
    dead_letter = get_object_or_404(DeadLetter, message=message)
    asked_again = None
    try:
        asked_again = dead_letter_retry(
            dead_letter=dead_letter, by=request.user, reason="Retried by its owner."
        )
        status, said = 204, ""
    except InvalidTransition as refused:
        # Staff (or another tab) dealt with it first, or it failed again after the person's
        # own retry and is left for staff: the page shows which.
        said = str(refused).split(": ", 1)[-1]
        status, said = 409, said[:1].upper() + said[1:]
    if not request.htmx:
        if said:
            messages.info(request, said)
        return redirect(conversation_url(conversation))
    response = HttpResponse(said, status=status)
    return focus_exchange(response, asked_again.pk) if asked_again else response


def focus_exchange(response: HttpResponse, message_id: int) -> HttpResponse:
    """An in-thread action's answer names the exchange that keyboard focus goes to once the
    page shows it: the one acted on, or the one that replaced it (a new version, the message
    asked again)."""
    return trigger_client_event(response, "continuity:focus-exchange", {"id": message_id})


def conversation_url(conversation: Conversation) -> str:
    return reverse("chat:conversation", args=[conversation.pk])
