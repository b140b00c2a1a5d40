"""The staff console's overview, crash history, waiting and paused conversations, alerts."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.forms import Form
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from continuity.actions import (
    alert_acknowledge,
    conversation_pause,
    conversation_resume,
    conversation_retry_now,
    reply_stop,
)
from continuity.delivery import alerts_reach_someone
from continuity.errors import InvalidTransition
from continuity.htmx import HtmxHttpRequest
from continuity.models import Alert, Conversation, Message, Run

from . import selectors
from .charts import timeline_chart
from .decorators import staff_required
from .forms import OptionalReasonForm, PauseForm, ReasonForm, RetryNowForm, StopForm
from .takeover_forms import takeover_context
from .timeline import message_timeline

PAGE_SIZE = 50


@never_cache
@require_GET
@staff_required
def index_view(request: HtmxHttpRequest) -> HttpResponse:
    """Live state at a glance; htmx polls the overview partial, a reload renders it whole."""
    template = "dashboard/index.html#overview" if request.htmx else "dashboard/index.html"
    return render(
        request,
        template,
        {
            "workers": selectors.workers_overview(),
            "running": selectors.running_attempts(),
            "queue": selectors.queue_figures(),
            "replies": selectors.reply_figures(),
            "absorbed": selectors.absorbed_figures(),
            "open": selectors.open_figures(),
            "chart": timeline_chart(selectors.crash_timeline()),
            "alerts_configured": alerts_reach_someone(),
            "no_worker": selectors.no_worker_alert(),
            "heartbeat_seconds": settings.CONTINUITY_HEARTBEAT_SECONDS,
        },
    )


@never_cache
@require_GET
@staff_required
def crashes_view(request: HttpRequest) -> HttpResponse:
    hours = 24 * 7 if request.GET.get("period") == "week" else 24
    found = selectors.crashes_within(hours=hours)
    return render(
        request,
        "dashboard/crashes.html",
        {
            "hours": hours,
            "chart": timeline_chart(selectors.crash_timeline(hours=hours)),
            "page": Paginator(found, PAGE_SIZE).get_page(request.GET.get("page")),
        },
    )


@never_cache
@require_GET
@staff_required
def paused_view(request: HttpRequest) -> HttpResponse:
    conversations = selectors.paused_conversations()
    return render(
        request,
        "dashboard/paused.html",
        {"page": Paginator(conversations, PAGE_SIZE).get_page(request.GET.get("page"))},
    )


def waiting_page(request, *, invalid: tuple[int, str, Form] | None = None, status=200):
    """`invalid`: (conversation id, action, form) of a refused action, shown with its row."""
    page = Paginator(selectors.waiting_conversations(), PAGE_SIZE).get_page(request.GET.get("page"))
    rows = []
    for conversation in page:
        row = selectors.waiting_of(conversation=conversation)
        forms = {
            "retry_now": RetryNowForm(prefix=f"retry-{conversation.pk}"),
            "pause": PauseForm(prefix=f"pause-{conversation.pk}"),
        }
        if invalid and invalid[0] == conversation.pk:
            forms[invalid[1]] = invalid[2]
        rows.append((row, forms))
    return render(request, "dashboard/waiting.html", {"page": page, "rows": rows}, status=status)


@never_cache
@require_GET
@staff_required
def waiting_view(request: HttpRequest) -> HttpResponse:
    """Sidekiq's Retries and Scheduled in one: every conversation with messages waiting, why,
    for how long, and when it is tried next."""
    return waiting_page(request)


@require_POST
@staff_required
def conversation_retry_now_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = get_object_or_404(Conversation, pk=pk)
    form = RetryNowForm(request.POST, prefix=f"retry-{pk}")
    if not form.is_valid():
        return waiting_page(request, invalid=(pk, "retry_now", form), status=422)
    try:
        conversation_retry_now(
            conversation=conversation, by=request.user, reason=form.cleaned_data["reason"]
        )
        messages.success(request, f"{conversation}: its wait is over, it is tried now.")
    except InvalidTransition:
        messages.warning(request, f"{conversation} was no longer waiting on a backoff.")
    return redirect("dashboard:waiting")


@require_POST
@staff_required
def conversation_pause_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = get_object_or_404(Conversation, pk=pk)
    form = PauseForm(request.POST, prefix=f"pause-{pk}")
    if not form.is_valid():
        return waiting_page(request, invalid=(pk, "pause", form), status=422)
    try:
        conversation_pause(
            conversation=conversation, reason=form.cleaned_data["reason"], by=request.user
        )
        messages.success(request, f"{conversation} paused: resume it from its page.")
    except InvalidTransition:
        messages.warning(request, f"{conversation} was already paused.")
    return redirect("dashboard:waiting")


@never_cache
@require_GET
@staff_required
def message_timeline_view(request: HttpRequest, pk: int) -> HttpResponse:
    message = get_object_or_404(
        Message.objects.select_related("conversation", "conversation__owner"),
        pk=pk,
        role=Message.Role.USER,
    )
    return render(
        request,
        "dashboard/timeline.html",
        {"message": message, "events": message_timeline(message)},
    )


@never_cache
@require_GET
@staff_required
def message_find_view(request: HttpRequest) -> HttpResponse:
    """A message id (as the user's page has it, #exchange-<id>) to its timeline."""
    found = request.GET.get("id", "").strip().removeprefix("#").removeprefix("exchange-")
    if (
        found.isascii()
        and found.isdecimal()
        and Message.objects.filter(pk=found, role=Message.Role.USER).exists()
    ):
        return redirect("dashboard:message_timeline", int(found))
    messages.warning(request, f"No message has the id “{found[:40]}”.")
    return redirect("dashboard:index")


def run_stop_page(request, run, form, status=200) -> HttpResponse:
    return render(request, "dashboard/run_stop.html", {"run": run, "form": form}, status=status)


@never_cache
@require_http_methods(["GET", "POST"])
@staff_required
def run_stop_view(request: HttpRequest, pk: int) -> HttpResponse:
    """*Stop* a reply being written (the user's own Stop, by staff), after a confirmation page:
    the overview's tables refresh every 5 s and would wipe a reason typed in them."""
    run = get_object_or_404(Run.objects.select_related("conversation", "message"), pk=pk)
    if request.method == "GET":
        return run_stop_page(request, run, StopForm())
    form = StopForm(request.POST)
    if not form.is_valid():
        return run_stop_page(request, run, form, status=422)
    try:
        reply_stop(
            message=run.message, run_id=run.pk, by=request.user, reason=form.cleaned_data["reason"]
        )
        messages.success(request, f"Attempt {run.pk} stopped: the user sees its reply as stopped.")
    except InvalidTransition:
        messages.warning(request, f"Attempt {run.pk} had already ended: nothing was stopped.")
    return redirect("dashboard:index")


def conversation_page(
    request, conversation, *, resume_form=None, status=200, **takeover_forms
) -> HttpResponse:
    return render(
        request,
        "dashboard/conversation.html",
        {
            "conversation": conversation,
            **takeover_context(conversation, **takeover_forms),
            "chart": timeline_chart(
                selectors.crash_timeline(hours=24 * 7, crashes=conversation.crashes.all())
            ),
            **selectors.conversation_record(conversation=conversation),
            "resume_form": resume_form or ReasonForm(),
        },
        status=status,
    )


@never_cache
@require_GET
@staff_required
def conversation_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = get_object_or_404(Conversation.objects.select_related("owner"), pk=pk)
    return conversation_page(request, conversation)


@require_POST
@staff_required
def conversation_resume_view(request: HttpRequest, pk: int) -> HttpResponse:
    conversation = get_object_or_404(Conversation, pk=pk)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        return conversation_page(request, conversation, resume_form=form, status=422)
    try:
        conversation_resume(
            conversation=conversation, by=request.user, reason=form.cleaned_data["reason"]
        )
        messages.success(request, f"{conversation} resumed: its queued messages are answered now.")
    except InvalidTransition as error:
        messages.warning(request, str(error))
    return redirect("dashboard:conversation", pk)


@never_cache
@require_GET
@staff_required
def alerts_view(request: HttpRequest) -> HttpResponse:
    show = request.GET.get("show", "open")
    found = selectors.alerts_shown(show=show)
    return render(
        request,
        "dashboard/alerts.html",
        {
            "show": show,
            "page": Paginator(found, PAGE_SIZE).get_page(request.GET.get("page")),
            "form": OptionalReasonForm(),
            "alerts_configured": alerts_reach_someone(),
        },
    )


@require_POST
@staff_required
def alert_acknowledge_view(request: HttpRequest, pk: int) -> HttpResponse:
    alert = get_object_or_404(Alert, pk=pk)
    form = OptionalReasonForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        alert_acknowledge(alert=alert, by=request.user, reason=reason)
        messages.success(request, f"Alert {alert.pk} acknowledged.")
    except InvalidTransition as error:
        messages.warning(request, str(error))
    return redirect("dashboard:alerts")
