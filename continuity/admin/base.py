"""What the admin's pages share: links between records, readable text, JSON and tracebacks,
actions confirmed with a reason through the services, and read-only history."""

from __future__ import annotations

import json
from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import model_ngettext, quote
from django.db import models
from django.db.models import F, Window
from django.db.models.functions import RowNumber
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.text import Truncator

from ..models import (
    Message,
)

# Links between records ------------------------------------------------------------------------


def admin_link(obj: models.Model | None, text=None) -> str | None:
    """A link to the object's admin page; None (shown as "-") when there is no object."""
    if obj is None:
        return None
    opts = obj._meta
    try:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])
    except NoReverseMatch:  # a model without an admin page
        return format_html("{}", obj if text is None else text)
    return format_html('<a href="{}">{}</a>', url, obj if text is None else text)


def changelist_link(model: type[models.Model], text, **filters) -> str:
    """A link to the model's list, filtered: `changelist_link(Run, "runs", message__id=7)`."""
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    return format_html('<a href="{}?{}">{}</a>', url, urlencode(filters), text)


def link_column(field: str, description: str = ""):
    """A list_display column linking to the object a foreign key points to."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def column(obj):
        return admin_link(getattr(obj, field))

    column.__name__ = f"{field}_link"
    return column


def timeline_link(message: Message) -> str | None:
    """The staff console's timeline of a user message: its whole story on one page."""
    if message.role != Message.Role.USER:
        return None
    url = reverse("dashboard:message_timeline", args=[message.pk])
    return format_html('<a href="{}">Message {}, in order</a>', url, message.pk)


def related_links(*pairs: tuple[str, str | None]) -> str:
    """(label, link) pairs as a list; pairs without a link are left out."""
    items = [(label, link) for label, link in pairs if link]
    if not items:
        return "-"
    return format_html(
        '<ul class="related-links">{}</ul>',
        format_html_join("", "<li>{}: {}</li>", items),
    )


def counted(count: int, singular: str, plural: str = "") -> str:
    return f"{count} {singular if count == 1 else plural or singular + 's'}"


# Readable text, JSON and tracebacks -----------------------------------------------------------


def pre(text: str, css: str = "admin-text") -> str:
    return format_html('<pre class="{}">{}</pre>', css, text) if text else "-"


def json_pre(value) -> str:
    return pre(json.dumps(value, indent=2, ensure_ascii=False, default=str), "admin-json")


def traceback_details(traceback: str) -> str:
    """Tracebacks are long: folded, one click away."""
    if not traceback:
        return ""
    return format_html(
        '<details class="traceback"><summary>Traceback</summary><pre class="admin-text">{}</pre>'
        "</details>",
        traceback,
    )


def short(text: str, length: int = 80) -> str:
    return Truncator(text).chars(length)


def moment(value: str | None) -> str:
    """An ISO timestamp from a JSON snapshot, in the admin's time zone."""
    if not value:
        return "-"
    return f"{timezone.localtime(datetime.fromisoformat(value)):%Y-%m-%d %H:%M:%S}"


def duration(started: str | None, ended: str | None) -> str:
    if not (started and ended):
        return "-"
    seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds()
    return f"{seconds:.1f} s"


def staff_actions_table(actions) -> str:
    """The audit rows of a record: when, what, who and why."""
    rows = [
        (
            admin_link(action, f"{timezone.localtime(action.created_at):%Y-%m-%d %H:%M:%S}"),
            action.get_kind_display(),
            action.actor_name,
            action.reason or "-",
        )
        for action in actions
    ]
    if not rows:
        return "None yet."
    return format_html(
        '<table class="history-table"><thead><tr><th>When</th><th>What</th><th>Who</th>'
        "<th>Why</th></tr></thead><tbody>{}</tbody></table>",
        format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
    )


def attempts_table(attempts: list[dict]) -> str:
    """A dead letter's attempts snapshot, one row each, tracebacks folded under the error."""
    rows = [
        (
            attempt.get("attempt", "?"),
            attempt.get("state", ""),
            attempt.get("worker") or "-",
            moment(attempt.get("started_at")),
            moment(attempt.get("ended_at")),
            duration(attempt.get("started_at"), attempt.get("ended_at")),
            format_html(
                "{}{}",
                pre(attempt.get("error", "")),
                traceback_details(attempt.get("traceback", "")),
            ),
        )
        for attempt in attempts
    ]
    if not rows:
        return "None."
    return format_html(
        '<table class="history-table attempts"><thead><tr><th>Attempt</th><th>State</th>'
        "<th>Worker</th><th>Started</th><th>Ended</th><th>Duration</th><th>Error</th></tr>"
        "</thead><tbody>{}</tbody></table>",
        format_html_join("", "<tr>" + "<td>{}</td>" * 7 + "</tr>", rows),
    )


# Actions: confirmed, with a reason, through the services --------------------------------------


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))
    confirmed = forms.CharField(widget=forms.HiddenInput, initial="yes")

    def __init__(self, *args, reason_required: bool, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["reason"].required = reason_required
        self.fields["reason"].help_text = (
            "Required" if reason_required else "Optional"
        ) + ": it is kept in the audit log with your name."


def confirm_then(
    modeladmin: admin.ModelAdmin,
    request,
    items: list,
    *,
    action: str,
    question: str,
    button: str,
    reason_required: bool,
    perform,
    done: str,
) -> TemplateResponse | None:
    """Django's delete_selected pattern: the action's first POST answers with a page that asks
    for a reason and re-posts the action and the selected ids; the second POST (`confirmed`)
    calls `perform(items, reason) -> (count done, problems)` and returns None: back to the list,
    with `done` ("Retried {count} {items}.") and each problem as messages."""
    form = ReasonForm(
        request.POST if "confirmed" in request.POST else None, reason_required=reason_required
    )
    if form.is_valid():
        count, problems = perform(items, form.cleaned_data["reason"])
        modeladmin.message_user(
            request,
            done.format(count=count, items=model_ngettext(modeladmin.opts, count)),
            messages.SUCCESS if count else messages.WARNING,
        )
        for problem in problems:
            modeladmin.message_user(request, problem, messages.WARNING)
        return None
    return TemplateResponse(
        request,
        "admin/continuity/action_confirmation.html",
        {
            **modeladmin.admin_site.each_context(request),
            "opts": modeladmin.opts,
            "title": modeladmin.get_actions(request)[action][2],
            "question": question,
            "items": items,
            "form": form,
            "action": action,
            "button": button,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "cancel_url": request.get_full_path(),
        },
    )


class ChangedByActionsAdmin(admin.ModelAdmin):
    """Records that change only through services, run as admin actions. The model-level change
    permission offers the actions; a record's own page is view-only (its fields are history),
    and nobody adds or deletes them."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False


# Read-only history ----------------------------------------------------------------------------


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is evidence: it can be viewed (with the view permission), never added, edited or
    deleted from the admin, not even by a superuser. With no delete permission Django also
    drops the "delete selected" action."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def newest_of_each_conversation(queryset, *, by: str = "id", limit: int = 50):
    """For an inline on a conversation's page: a formset's queryset cannot be sliced (the
    formset filters it again by conversation), so a window function ranks each conversation's
    rows and the newest are kept. The conversation filter still runs before the ranking."""
    rank = Window(RowNumber(), partition_by=F("conversation"), order_by=F(by).desc())
    return queryset.annotate(rank=rank).filter(rank__lte=limit)


class ReadOnlyInline(admin.TabularInline):
    """Rows of a long history on a conversation's page: the newest 50, read-only."""

    template = "admin/continuity/edit_inline/history.html"
    extra = 0
    can_delete = False
    show_change_link = True
    ordering = ["-id"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return newest_of_each_conversation(super().get_queryset(request))
