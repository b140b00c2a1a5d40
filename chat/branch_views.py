"""Versions and branches of a conversation: edit a sent message, regenerate the last reply,
continue a reply the model cut off, show another version, and load older exchanges of the shown
branch."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from continuity.actions import message_edit, reply_regenerate, version_show
from continuity.delivery import message_accept
from continuity.errors import ClientIdReused, InvalidMessage, InvalidTransition
from continuity.htmx import HtmxHttpRequest
from continuity.models import Message
from continuity.selectors import exchanges_page

from .throttles import rate_limit_wait
from .views import (
    PAGE,
    conversation_url,
    focus_exchange,
    login_required_or_401,
    made_again_through_outages,
    own_conversation,
)

# The follow-up *Continue* sends: the model sees its cut-off reply just before it.
CONTINUE_TEXT = "Please go on from where your reply stopped."


class ClientIdForm(forms.Form):
    client_id = forms.UUIDField(
        error_messages=dict.fromkeys(
            ("required", "invalid"), "This form is out of date; reload the page and try again."
        )
    )


class EditForm(ClientIdForm):
    text = forms.CharField(strip=False, required=False)


def own_user_message(request: HttpRequest, pk: int, message_pk: int) -> Message:
    conversation = own_conversation(request, pk)
    return get_object_or_404(conversation.messages, pk=message_pk, role=Message.Role.USER)


def refused(request: HtmxHttpRequest, message: Message, text: str, status: int) -> HttpResponse:
    """The reason, said where the form is (htmx), or on the conversation page."""
    if request.htmx:
        return HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")
    messages.error(request, text)
    return redirect(conversation_url(message.conversation))


def done(request: HtmxHttpRequest, message: Message, anchor_id: int) -> HttpResponse:
    """204 for htmx (the page learns what changed over its websocket), else back to the page."""
    if request.htmx:
        return focus_exchange(HttpResponse(status=204), anchor_id)
    return redirect(f"{conversation_url(message.conversation)}#exchange-{anchor_id}")


def form_error(form: forms.Form) -> str:
    return " ".join(str(error) for errors in form.errors.values() for error in errors)


@never_cache
@require_POST
@login_required_or_401
def message_edit_view(request: HttpRequest, pk: int, message_pk: int) -> HttpResponse:
    """*Edit*: the edited text is asked as a new version, on a new branch from this message."""
    message = own_user_message(request, pk, message_pk)
    form = EditForm(request.POST)
    if not form.is_valid():
        return refused(request, message, form_error(form), 422)
    try:
        added = message_edit(
            message=message,
            text=form.cleaned_data["text"],
            client_id=form.cleaned_data["client_id"],
            by=request.user,
        )
    except InvalidMessage as error:
        return refused(request, message, str(error), 422)
    except (InvalidTransition, ClientIdReused) as error:
        return refused(request, message, str(error), 409)
    return done(request, message, added.pk)


@never_cache
@require_POST
@login_required_or_401
def reply_regenerate_view(request: HttpRequest, pk: int, message_pk: int) -> HttpResponse:
    """*Regenerate* the last reply: the message is asked again; the old reply stays a version."""
    message = own_user_message(request, pk, message_pk)
    form = ClientIdForm(request.POST)
    if not form.is_valid():
        return refused(request, message, form_error(form), 422)
    try:
        added = reply_regenerate(message=message, client_id=form.cleaned_data["client_id"])
    except (InvalidTransition, ClientIdReused) as error:
        return refused(request, message, str(error), 409)
    return done(request, message, added.pk)


@never_cache
@require_POST
@made_again_through_outages
@login_required_or_401
def reply_continue_view(request: HttpRequest, pk: int, message_pk: int) -> HttpResponse:
    """*Continue* a reply the model cut off at its length limit: a follow-up message, sent like
    any other, asks it to go on."""
    message = own_user_message(request, pk, message_pk)
    form = ClientIdForm(request.POST)
    if not form.is_valid():
        return refused(request, message, form_error(form), 422)
    if not Message.objects.filter(reply_to=message, cut_off=True).exists():
        return refused(request, message, "Only a reply that was cut off can be continued.", 409)
    if seconds := rate_limit_wait(action="send", who=request.user.pk):
        too_fast = f"You are sending faster than the assistant can answer. Wait {seconds} s."
        response = refused(request, message, too_fast, 429)
        response["Retry-After"] = str(seconds)
        return response
    try:
        added = message_accept(
            conversation=message.conversation,
            text=CONTINUE_TEXT,
            client_id=form.cleaned_data["client_id"],
        )
    except ClientIdReused as error:
        return refused(request, message, str(error), 409)
    return done(request, message, added.pk)


@never_cache
@require_POST
@login_required_or_401
def version_show_view(request: HttpRequest, pk: int, message_pk: int) -> HttpResponse:
    """Show this version (and the branch that follows it) instead of the shown one."""
    message = own_user_message(request, pk, message_pk)
    try:
        version_show(message=message)
    except InvalidTransition as error:
        return refused(request, message, str(error), 409)
    return done(request, message, message.pk)


@never_cache
@require_GET
@login_required_or_401
def exchanges_older_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """The page of exchanges before `before`, with the link to the ones before those."""
    conversation = own_conversation(request, pk)
    try:
        before = int(request.GET["before"])
    except (KeyError, ValueError):
        return HttpResponse("Say which message to load before: ?before=<id>.", status=400)
    if not request.htmx:
        return redirect(f"{conversation_url(conversation)}?before={before}")
    page = exchanges_page(conversation=conversation, before=before)
    return render(request, f"{PAGE}#older", {"conversation": conversation, "page": page})
