"""Dead letters: find them, read every attempt, and retry, edit and retry, or discard them."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from continuity.actions import (
    dead_letter_discard,
    dead_letter_retry,
    dead_letters_discard,
    dead_letters_retry,
)
from continuity.errors import InvalidMessage, InvalidTransition
from continuity.models import Conversation, DeadLetter, Message
from continuity.words import plural

from . import selectors
from .decorators import staff_required
from .forms import BulkForm, DeadLetterFilterForm, EditAndRetryForm, OptionalReasonForm, ReasonForm

PAGE_SIZE = 25


def filter_form(data: QueryDict) -> DeadLetterFilterForm:
    return DeadLetterFilterForm(data, error_classes=selectors.dead_letter_error_classes())


def filtered(form: DeadLetterFilterForm) -> QuerySet[DeadLetter]:
    return selectors.dead_letters_matching(data=form.cleaned_data if form.is_valid() else None)


@never_cache
@require_GET
@staff_required
def dead_letter_list_view(request: HttpRequest) -> HttpResponse:
    form = filter_form(request.GET)
    found = filtered(form)
    page = Paginator(found, PAGE_SIZE).get_page(request.GET.get("page"))
    filters = request.GET.copy()
    filters.pop("page", None)
    return render(
        request,
        "dashboard/dead_letters.html",
        {
            "form": form,
            "page": page,
            "filters": filters.urlencode(),
            "matching_pending": found.filter(status=DeadLetter.Status.PENDING).count(),
        },
    )


def detail_page(request, dead_letter, *, forms=None, status=200) -> HttpResponse:
    message = dead_letter.message
    forms = {
        "retry_form": OptionalReasonForm(auto_id="retry-%s"),
        "edit_form": EditAndRetryForm(initial={"text": message.text}, auto_id="edit-%s"),
        "discard_form": ReasonForm(auto_id="discard-%s"),
        **(forms or {}),
    }
    return render(
        request,
        "dashboard/dead_letter.html",
        {
            "dead_letter": dead_letter,
            "message": message,
            "around": selectors.exchanges_around(message=message),
            "attempts": selectors.attempts_of(dead_letter=dead_letter),
            "actions": selectors.dead_letter_actions(dead_letter=dead_letter),
            "paused": dead_letter.conversation.state == Conversation.State.PAUSED,
            **forms,
        },
        status=status,
    )


def dead_letter_of(pk: int) -> DeadLetter:
    return get_object_or_404(
        DeadLetter.objects.select_related(
            "message", "conversation", "owner", "retried_as__reply", "resolved_by"
        ),
        pk=pk,
    )


@never_cache
@require_GET
@staff_required
def dead_letter_detail_view(request: HttpRequest, pk: int) -> HttpResponse:
    return detail_page(request, dead_letter_of(pk))


def retried_message(request, dead_letter, reask: Message) -> None:
    waiting = {
        Conversation.State.PAUSED: " The conversation is paused: it is answered once staff "
        "resume it.",
        Conversation.State.TAKEN_OVER: " The conversation is taken over: support answers it, or "
        "the assistant once it is handed back.",
    }.get(dead_letter.conversation.state, " The user sees it being answered.")
    messages.success(
        request, f"Asked again as message {reask.pk}, at the end of the conversation.{waiting}"
    )


@require_POST
@staff_required
def dead_letter_retry_view(request: HttpRequest, pk: int) -> HttpResponse:
    dead_letter = dead_letter_of(pk)
    form = OptionalReasonForm(request.POST, auto_id="retry-%s")
    if not form.is_valid():
        return detail_page(request, dead_letter, forms={"retry_form": form}, status=422)
    try:
        reask = dead_letter_retry(
            dead_letter=dead_letter, by=request.user, reason=form.cleaned_data["reason"]
        )
        retried_message(request, dead_letter, reask)
    except InvalidTransition as error:
        messages.warning(request, str(error))
    return redirect("dashboard:dead_letter", pk)


@require_POST
@staff_required
def dead_letter_edit_view(request: HttpRequest, pk: int) -> HttpResponse:
    dead_letter = dead_letter_of(pk)
    form = EditAndRetryForm(request.POST, auto_id="edit-%s")
    if form.is_valid():
        try:
            reask = dead_letter_retry(
                dead_letter=dead_letter,
                by=request.user,
                reason=form.cleaned_data["reason"],
                text=form.cleaned_data["text"],
            )
            retried_message(request, dead_letter, reask)
            return redirect("dashboard:dead_letter", pk)
        except InvalidMessage as error:
            form.add_error("text", str(error))
        except InvalidTransition as error:
            messages.warning(request, str(error))
            return redirect("dashboard:dead_letter", pk)
    return detail_page(request, dead_letter, forms={"edit_form": form}, status=422)


@require_POST
@staff_required
def dead_letter_discard_view(request: HttpRequest, pk: int) -> HttpResponse:
    dead_letter = dead_letter_of(pk)
    form = ReasonForm(request.POST, auto_id="discard-%s")
    if not form.is_valid():
        return detail_page(request, dead_letter, forms={"discard_form": form}, status=422)
    try:
        dead_letter_discard(
            dead_letter=dead_letter, by=request.user, reason=form.cleaned_data["reason"]
        )
        messages.success(request, "Discarded. The user sees that this message was discarded.")
    except InvalidTransition as error:
        messages.warning(request, str(error))
    return redirect("dashboard:dead_letter", pk)


def bulk_selection(request: HttpRequest, form: BulkForm) -> QuerySet[DeadLetter]:
    """The pending dead letters the staff member picked: ticked ids, or a whole filter."""
    if form.cleaned_data["scope"] == "matching":
        found = filtered(filter_form(QueryDict(form.cleaned_data["query"])))
    else:
        ids = [int(i) for i in request.POST.getlist("ids") if i.isdigit()]
        found = DeadLetter.objects.filter(pk__in=ids)
    return found.filter(status=DeadLetter.Status.PENDING).select_related("owner", "message")


@require_POST
@staff_required
def dead_letter_bulk_view(request: HttpRequest) -> HttpResponse:
    """First post: a confirmation page naming how many. Second post (confirmed): the action,
    on exactly the dead letters listed on that page that are still pending."""
    form = BulkForm(request.POST)
    if not form.is_valid():
        messages.warning(request, "Choose retry or discard.")
        return redirect("dashboard:dead_letters")
    selection = list(bulk_selection(request, form))
    action, reason = form.cleaned_data["action"], form.cleaned_data["reason"]
    needs_reason = action == "discard" and not reason.strip()
    if form.cleaned_data["confirmed"] and selection and not needs_reason:
        act = dead_letters_retry if action == "retry" else dead_letters_discard
        done, problems = act(dead_letters=selection, by=request.user, reason=reason)
        verb = (
            "retried: each is asked again at the end of its conversation"
            if action == "retry"
            else "discarded"
        )
        messages.success(request, f"{plural(done, 'dead letter')} {verb}.")
        for problem in problems:
            messages.warning(request, problem)
        return redirect(f"{reverse('dashboard:dead_letters')}?status=pending")
    return render(
        request,
        "dashboard/bulk_confirm.html",
        {
            "action": action,
            "selection": selection,
            "reason": reason,
            "reason_missing": form.cleaned_data["confirmed"] and needs_reason,
        },
        status=422 if form.cleaned_data["confirmed"] else 200,
    )
