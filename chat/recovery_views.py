"""What a restart recovered, for the person whose conversation it was, and their corrections."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from continuity.context import context_text, handoff_correct, recovery_words, run_context_load
from continuity.models import Recovery, RunContext

from .rendering import markdown_to_safe_html
from .views import own_conversation

PAGE = "chat/recovery.html"


class CorrectionForm(forms.Form):
    text = forms.CharField(
        label="What should the assistant know instead?",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
    )


def recovery_of(request: HttpRequest, pk: int, recovery_pk: int) -> Recovery:
    conversation = own_conversation(request, pk)
    return get_object_or_404(Recovery, pk=recovery_pk, conversation=conversation)


def recovery_page(request: HttpRequest, recovery: Recovery, form: CorrectionForm, status=200):
    """The banner's words, then what the resuming attempt was given as a short document in the
    same words, and the engine's own rendering of it under "Technical details"."""
    run_context = RunContext.objects.filter(run_id=recovery.run_id).first()
    given = run_context_load(run_context) if run_context else None
    return render(
        request,
        PAGE,
        {
            "recovery": recovery,
            "words": recovery_words(recovery),
            "given": given,
            "summary_html": mark_safe(markdown_to_safe_html(given.summary)) if given else "",  # noqa: S308 (nh3-sanitized)
            "technical": context_text(given) if given else "",
            "form": form,
        },
        status=status,
    )


@never_cache
@require_GET
@login_required
def recovery_detail_view(request: HttpRequest, pk: int, recovery_pk: int) -> HttpResponse:
    """The stored context of the resuming attempt, readable: exactly what the assistant was
    given after the restart."""
    return recovery_page(request, recovery_of(request, pk, recovery_pk), CorrectionForm())


@never_cache
@require_POST
@login_required
def recovery_correct_view(request: HttpRequest, pk: int, recovery_pk: int) -> HttpResponse:
    recovery = recovery_of(request, pk, recovery_pk)
    form = CorrectionForm(request.POST)
    if not form.is_valid():
        return recovery_page(request, recovery, form, status=422)
    handoff_correct(
        conversation_id=recovery.conversation_id,
        text=form.cleaned_data["text"],
        author=request.user,
    )
    messages.success(request, "Thanks: your correction goes into the assistant's next reply.")
    return redirect(reverse("chat:recovery", args=[pk, recovery_pk]))
