"""A conversation's own notes, for the person whose conversation it is: its goal, what to keep
in mind, its next steps and decisions (its newest handoff), which no other conversation sees.
They correct them (a line the next reply reads) or forget a line, at any time, also while a
reply is being written: the reply's end keeps both."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from continuity.context import handoff_correct, handoff_forget_line, handoff_latest
from continuity.models import Conversation, sections_lines

from .brains.builtin import WORKING_ON
from .recovery_views import CorrectionForm
from .views import own_conversation

PAGE = "chat/notes.html"


class ForgetLineForm(forms.Form):
    section = forms.ChoiceField(choices=[("critical_context", ""), ("decisions", "")])
    line = forms.CharField(max_length=4000)


def notes_page(
    request: HttpRequest, conversation: Conversation, form: CorrectionForm, status: int = 200
) -> HttpResponse:
    handoff = handoff_latest(conversation_id=conversation.pk)
    state = sections_lines(handoff.current_state) if handoff else []
    goals = [line.removeprefix(WORKING_ON) for line in state if line.startswith(WORKING_ON)]
    return render(
        request,
        PAGE,
        {
            "conversation": conversation,
            "handoff": handoff,
            "goal": goals[0] if goals else "",
            "state": [line for line in state if not line.startswith(WORKING_ON)],
            "keep_in_mind": sections_lines(handoff.critical_context) if handoff else [],
            "next_steps": sections_lines(handoff.next_steps) if handoff else [],
            "decisions": sections_lines(handoff.decisions) if handoff else [],
            "form": form,
        },
        status=status,
    )


@never_cache
@require_GET
@login_required
def conversation_notes_view(request: HttpRequest, pk: int) -> HttpResponse:
    return notes_page(request, own_conversation(request, pk), CorrectionForm())


@never_cache
@require_POST
@login_required
def conversation_note_correct_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    form = CorrectionForm(request.POST)
    if not form.is_valid():
        return notes_page(request, conversation, form, status=422)
    handoff_correct(
        conversation_id=conversation.pk, text=form.cleaned_data["text"], author=request.user
    )
    messages.success(request, "Added. The assistant reads it from its next reply on.")
    return redirect(reverse("chat:notes", args=[conversation.pk]))


@never_cache
@require_POST
@login_required
def conversation_note_forget_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = own_conversation(request, pk)
    form = ForgetLineForm(request.POST)
    if not form.is_valid():
        return notes_page(request, conversation, CorrectionForm(), status=422)
    forgotten = handoff_forget_line(
        conversation_id=conversation.pk,
        section=form.cleaned_data["section"],
        line=form.cleaned_data["line"],
        author=request.user,
    )
    if forgotten:
        messages.success(request, "Forgotten. The assistant no longer reads it here.")
    else:
        messages.info(request, "That note was already gone.")
    return redirect(reverse("chat:notes", args=[conversation.pk]))
