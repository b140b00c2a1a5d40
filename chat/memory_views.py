"""The "What I remember" page: a person reads, corrects and forgets what the agent knows."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import push_url

from continuity.actions import reminder_cancel
from continuity.context import memory_fact_forget, memory_fact_revise, memory_facts_of
from continuity.htmx import HtmxHttpRequest
from continuity.models import Reminder

from .forms import MemoryFactForm
from .rendering import FACT_LABELS, fact_label, reminder_when
from .views import login_required_or_401

PAGE = "chat/memory.html"


def fact_rows(request: HttpRequest, *, invalid=None, invalid_form=None) -> list[dict]:
    return [
        {
            "fact": fact,
            "label": fact_label(fact.key),
            "form": invalid_form
            if fact == invalid
            else MemoryFactForm(initial={"value": fact.value}, auto_id=f"fact-{fact.pk}-%s"),
        }
        for fact in sorted(memory_facts_of(request.user), key=shown_order)
    ]


def shown_order(fact) -> tuple[int, str]:
    """Name, goal, likes, note: who you are first, then what you asked me to keep."""
    keys = list(FACT_LABELS)
    return (keys.index(fact.key) if fact.key in keys else len(keys), fact.key)


def memory_page(
    request: HtmxHttpRequest, *, rows: list[dict], confirm=None, notice: str = "", status: int = 200
) -> HttpResponse:
    """The page, or only its main part for htmx (which swaps it in place and moves the URL)."""
    template = f"{PAGE}#main" if request.htmx else PAGE
    context = {
        "rows": rows,
        "confirm": confirm,
        "notice": notice,
        "reminders": reminders_of(request.user),
    }
    response = render(request, template, context, status=status)
    return push_url(response, request.path) if request.htmx and confirm else response


def memory_done(request: HtmxHttpRequest, notice: str) -> HttpResponse:
    if not request.htmx:
        messages.success(request, notice)
        return redirect("chat:memory")
    response = memory_page(request, rows=fact_rows(request), notice=notice)
    return push_url(response, reverse("chat:memory"))


@never_cache
@require_GET
@login_required
def memory_view(request: HttpRequest) -> HttpResponse:
    return memory_page(request, rows=fact_rows(request))


@never_cache
@require_GET
@login_required
def memory_fact_forget_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Asks before forgetting: the same page, with a confirmation in place of the fact."""
    fact = get_object_or_404(memory_facts_of(request.user), pk=pk)
    return memory_page(request, rows=fact_rows(request), confirm=fact)


@never_cache
@require_POST
@login_required_or_401
def memory_fact_edit_view(request: HttpRequest, pk: int) -> HttpResponse:
    fact = get_object_or_404(memory_facts_of(request.user), pk=pk)
    form = MemoryFactForm(request.POST, auto_id=f"fact-{fact.pk}-%s")
    if not form.is_valid():
        rows = fact_rows(request, invalid=fact, invalid_form=form)
        return memory_page(request, rows=rows, status=422)
    memory_fact_revise(fact=fact, value=form.cleaned_data["value"])
    return memory_done(request, "Saved. I'll use the new wording from your next message on.")


def reminders_of(owner) -> list:
    """Their reminders still to come, soonest first, each with its time in their own zone."""
    reminders = list(
        Reminder.objects.filter(owner=owner, state=Reminder.State.SCHEDULED).select_related(
            "conversation"
        )
    )
    for reminder in reminders:
        reminder.when = reminder_when(reminder)
    return reminders


@never_cache
@require_POST
@login_required_or_401
def reminder_cancel_view(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    reminder = get_object_or_404(Reminder.objects.filter(owner=request.user), pk=pk)
    if reminder_cancel(reminder=reminder):
        return memory_done(request, "Reminder cancelled.")
    return memory_done(
        request, "That reminder was not waiting any more: it came, or was cancelled."
    )


@never_cache
@require_POST
@login_required_or_401
def memory_fact_delete_view(request: HttpRequest, pk: int) -> HttpResponse:
    fact = get_object_or_404(memory_facts_of(request.user), pk=pk)
    memory_fact_forget(fact=fact)
    return memory_done(request, "Forgotten. I won't use it in any conversation.")
