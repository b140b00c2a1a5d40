"""Take a conversation over, reply in it as support, hand it back: each a POST from the
conversation's console page, audited (continuity/actions/takeover.py)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRefresh

from continuity.actions import (
    conversation_hand_back,
    conversation_take_over,
    staff_reply,
    tool_call_answer,
)
from continuity.errors import InvalidTransition
from continuity.models import Conversation, ToolCall

from .decorators import staff_required
from .forms import HandBackForm, StaffReplyForm, TakeOverForm
from .takeover_forms import takeover_context, thread_stamp
from .views import conversation_page


def conversation_of(pk: int) -> Conversation:
    return get_object_or_404(Conversation.objects.select_related("owner", "taken_over_by"), pk=pk)


@require_POST
@staff_required
def take_over_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = conversation_of(pk)
    form = TakeOverForm(request.POST, prefix="take-over")
    if not form.is_valid():
        return conversation_page(request, conversation, take_over_form=form, status=422)
    try:
        conversation_take_over(
            conversation=conversation, by=request.user, reason=form.cleaned_data["reason"]
        )
        messages.success(request, "You took the conversation over: the assistant is paused.")
    except InvalidTransition as error:
        messages.warning(request, str(error))
    return redirect("dashboard:conversation", pk)


@require_POST
@staff_required
def staff_reply_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = conversation_of(pk)
    form = StaffReplyForm(request.POST)
    if not form.is_valid():
        return conversation_page(request, conversation, reply_form=form, status=422)
    try:
        staff_reply(
            conversation=conversation,
            by=request.user,
            text=form.cleaned_data["text"],
            answering=form.cleaned_data["answering"],
        )
    except InvalidTransition as error:
        form.add_error("text", str(error))  # the text stays in the form
        return conversation_page(request, conversation, reply_form=form, status=409)
    return redirect(reverse("dashboard:conversation", args=[pk]) + "#thread")


@require_POST
@staff_required
def hand_back_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = conversation_of(pk)
    form = HandBackForm(request.POST)
    if not form.is_valid():
        return conversation_page(request, conversation, hand_back_form=form, status=422)
    try:
        conversation_hand_back(
            conversation=conversation, by=request.user, note=form.cleaned_data["note"]
        )
        messages.success(request, "Handed back: the assistant answers the waiting messages.")
    except InvalidTransition as error:
        messages.warning(request, str(error))
    return redirect("dashboard:conversation", pk)


@require_POST
@staff_required
def tool_call_answer_view(request: HttpRequest, pk: int, call_pk: int) -> HttpResponse:
    """Allow or Deny, for the person, a tool call that waits for their approval: only by the
    staff member who took the conversation over (403 for anyone else)."""
    conversation = conversation_of(pk)
    call = get_object_or_404(
        ToolCall.objects.select_related("message"), pk=call_pk, message__conversation=conversation
    )
    answer = request.POST.get("answer", "")
    if answer not in (ToolCall.Answer.ALLOW, ToolCall.Answer.DENY):
        return HttpResponse("Answer allow or deny.", status=400, content_type="text/plain")
    try:
        answered = tool_call_answer(call=call, answer=answer, by=request.user)
    except PermissionDenied:
        return HttpResponse(
            "Take the conversation over to answer for the person.",
            status=403,
            content_type="text/plain",
        )
    if answered:
        messages.success(request, f"{ToolCall.Answer(answer).label}: the assistant is told.")
    else:
        call.refresh_from_db()
        messages.warning(request, f"Already answered: {call.get_answer_display().lower()}.")
    return redirect(reverse("dashboard:conversation", args=[pk]) + "#thread")


@never_cache
@require_GET
@staff_required
def thread_view(request: HttpRequest, pk: int) -> HttpResponse:
    """The thread of a taken-over conversation, which the page polls while support answers."""
    conversation = conversation_of(pk)
    if conversation.state != Conversation.State.TAKEN_OVER:
        return HttpResponseClientRefresh()  # handed back meanwhile: the page shows it whole
    if request.GET.get("stamp") == thread_stamp(conversation):
        return HttpResponse(status=204)  # unchanged: a screen reader hears nothing again
    return render(
        request,
        "dashboard/conversation.html#thread",
        {"conversation": conversation, **takeover_context(conversation)},
    )
