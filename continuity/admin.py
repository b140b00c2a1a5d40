"""Staff tools in the Django admin. History (attempts, checkpoints, chunks, crashes, contexts,
recoveries, the audit log) is evidence: shown, linked, never edited. Changes go through the
services, as admin actions that ask for confirmation and a reason and leave a StaffAction row."""

from __future__ import annotations

import json
from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.utils import model_ngettext, quote
from django.core.exceptions import PermissionDenied
from django.db import models
from django.db.models import F, Window
from django.db.models.functions import Left, RowNumber
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import NoReverseMatch, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.text import Truncator

from continuity.actions import (
    alert_acknowledge,
    conversations_resume,
    dead_letters_discard,
    dead_letters_retry,
)
from continuity.context import (
    SECTIONS,
    handoff_latest,
    handoff_sections,
    handoff_write,
    run_context_text,
    summary_latest,
    summary_revise,
    versions_diff,
)

from .errors import InvalidTransition
from .models import (
    Alert,
    Checkpoint,
    Conversation,
    CrashRecord,
    DeadLetter,
    Handoff,
    MemoryFact,
    Message,
    Recovery,
    ReplyChunk,
    Run,
    RunContext,
    StaffAction,
    Summary,
    Worker,
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
        (admin_link(action, f"{timezone.localtime(action.created_at):%Y-%m-%d %H:%M:%S}"),
         action.get_kind_display(), action.actor_name, action.reason or "-")
        for action in actions
    ]  # fmt: skip
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
        (attempt.get("attempt", "?"), attempt.get("state", ""), attempt.get("worker") or "-",
         moment(attempt.get("started_at")), moment(attempt.get("ended_at")),
         duration(attempt.get("started_at"), attempt.get("ended_at")),
         format_html("{}{}", pre(attempt.get("error", "")),
                     traceback_details(attempt.get("traceback", ""))))
        for attempt in attempts
    ]  # fmt: skip
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


class MessageInline(ReadOnlyInline):
    model = Message
    verbose_name_plural = "messages (the newest 50, newest first)"
    fields = ["id", "role", "state", "attempts", "created_at", "short_text"]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(text_start=Left("text", 81)).defer("text")

    @admin.display(description="Text")
    def short_text(self, message):
        return short(message.text_start)


class RunInline(ReadOnlyInline):
    model = Run
    verbose_name_plural = "attempts (the newest 50, newest first)"
    fields = ["id", "message", "attempt", "state", "worker", "started_at", "ended_at",
              "short_error"]  # fmt: skip
    readonly_fields = fields

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .select_related("message")
            .annotate(error_start=Left("error", 81))
            .defer("error", "traceback", "message__text")
        )

    @admin.display(description="Error")
    def short_error(self, run):
        return short(run.error_start)


class HandoffInline(admin.TabularInline):
    """The conversation's handoff history, newest first; versions are never edited in place."""

    template = ReadOnlyInline.template
    model = Handoff
    verbose_name_plural = "handoffs (the newest 50 versions)"
    fields = ["version", "reason", "author", "run", "created_at", "next_step"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True
    ordering = ["-version"]

    def has_add_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        handoffs = super().get_queryset(request).select_related("author", "run")
        return newest_of_each_conversation(handoffs, by="version")

    @admin.display(description="Next step")
    def next_step(self, handoff):
        steps = handoff.next_steps.splitlines()
        return steps[0] if steps else ""


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["id", "title", link_column("owner"), "state", "retry_at", "updated_at"]
    list_select_related = ["owner"]
    list_filter = ["state"]
    search_fields = ["title", "owner__username"]
    raw_id_fields = ["owner"]

    def has_add_permission(self, request):
        return False  # conversations are started by their owners, through conversation_start

    # Lifecycle fields change only through services (the resume action), never by hand.
    readonly_fields = [
        "state", "paused_reason", "retry_at", "client_id", "enqueued_at", "archived_at",
        "created_at", "updated_at", "branch_changes", "history", "context_tools",
        "taken_over_by", "handed_back_at",
    ]  # fmt: skip
    inlines = [MessageInline, RunInline, HandoffInline]
    actions = ["resume"]

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="History")
    def history(self, conversation):
        if conversation.pk is None:
            return "-"
        return related_links(
            *(
                (label, changelist_link(model, counted(related.count(), noun, plural),
                                        conversation__id__exact=conversation.pk))
                for label, model, related, noun, plural in [
                    ("Messages", Message, conversation.messages, "message", ""),
                    ("Attempts", Run, conversation.runs, "attempt", ""),
                    ("Dead letters", DeadLetter, conversation.dead_letters, "dead letter", ""),
                    ("Crashes", CrashRecord, conversation.crashes, "crash record", ""),
                    ("Recoveries", Recovery, conversation.recoveries, "recovery", "recoveries"),
                    ("Alerts", Alert, conversation.alerts, "alert", ""),
                    ("Staff actions", StaffAction, conversation.staff_actions, "staff action", ""),
                ]
            )
        )  # fmt: skip

    @admin.display(description="Working memory")
    def context_tools(self, conversation):
        if conversation.pk is None:
            return ""
        return format_html(
            '<a href="{}">Edit the handoff as a new version</a> · '
            '<a href="{}">Edit the summary as a new version</a>',
            reverse("admin:continuity_handoff_edit", args=[conversation.pk]),
            reverse("admin:continuity_summary_edit", args=[conversation.pk]),
        )

    @admin.action(permissions=["change"], description="Resume selected paused conversations")
    def resume(self, request, queryset):
        items = list(queryset)
        paused = sum(item.state == Conversation.State.PAUSED for item in items)
        question = (
            f"{paused} {model_ngettext(self.opts, paused)} will be resumed: waiting messages are "
            "processed again, in order; earlier crashes stop counting toward a pause, and open "
            "alerts are acknowledged in your name."
        )
        if skipped := len(items) - paused:
            question += f" Left as they are: {skipped} not paused."
        return confirm_then(
            self, request, items,
            action="resume",
            question=question,
            button="Resume",
            reason_required=True,
            perform=lambda items, reason: conversations_resume(items, by=request.user,
                                                               reason=reason),
            done="Resumed {count} {items}.",
        )  # fmt: skip


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["id", link_column("conversation"), "role", "state", "attempts", "created_at"]
    list_select_related = ["conversation"]
    list_filter = ["state", "role"]
    search_fields = ["text"]
    # Messages come from people and the agent, through the services: staff read or delete them
    # (moderation), and correct a failed one through its dead letter's edit and retry.
    readonly_fields = ["conversation", "role", "text", "state", "attempts", "interruptions",
                       "version", "client_id", "reply_to", "reasked_from", "version_of",
                       "hidden_with", "forgotten_at", "author", "created_at", "updated_at",
                       "related"]  # fmt: skip

    def has_add_permission(self, request):
        return False

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Related")
    def related(self, message):
        if message.pk is None:
            return "-"
        of_it = {"message__id__exact": message.pk}
        return related_links(
            ("Timeline", timeline_link(message)),
            ("Conversation", admin_link(message.conversation)),
            ("Runs", changelist_link(Run, counted(message.runs.count(), "run"), **of_it)),
            ("Checkpoints", changelist_link(
                Checkpoint, counted(message.checkpoints.count(), "checkpoint"), **of_it)),
            ("Dead letter", admin_link(getattr(message, "dead_letter", None))),
            ("Reply", admin_link(getattr(message, "reply", None))),
            ("Reply to", admin_link(message.reply_to)),
            ("Re-asks", admin_link(message.reasked_from)),
            ("Re-asked as", format_html_join(", ", "{}", (
                (admin_link(reask),) for reask in message.reasks.order_by("id")))),
        )  # fmt: skip


class RunFieldsMixin:
    """Error and traceback as they were printed, not squeezed into one line."""

    @admin.display(description="Error")
    def error_text(self, obj):
        return pre(obj.error)

    @admin.display(description="Traceback")
    def traceback_text(self, obj):
        return traceback_details(obj.traceback) or "-"


@admin.register(Run)
class RunAdmin(RunFieldsMixin, ReadOnlyAdmin):
    list_display = ["id", link_column("message"), link_column("conversation"), "attempt",
                    "state", "worker", "started_at", "ended_at"]  # fmt: skip
    list_select_related = ["message", "conversation"]
    list_filter = ["state"]
    search_fields = ["worker", "node", "error"]
    fields = ["message", "conversation", "attempt", "state", "node", "incarnation", "worker",
              "started_at", "heartbeat_at", "ended_at", "error_text", "traceback_text", "related",
              "context_given"]  # fmt: skip
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Related")
    def related(self, run):
        of_it = {"run__id__exact": run.pk}
        return related_links(
            ("Its message's timeline", timeline_link(run.message)),
            ("Checkpoints", changelist_link(
                Checkpoint, counted(run.checkpoints.count(), "checkpoint"), **of_it)),
            ("Reply chunks", changelist_link(
                ReplyChunk, counted(run.reply_chunks.count(), "chunk"), **of_it)),
            ("Crash record", admin_link(getattr(run, "crash", None))),
            ("Resumes after", admin_link(getattr(run, "recovery", None))),
            ("Resumed by", admin_link(Recovery.objects.filter(interrupted_run=run).first())),
            ("Context", admin_link(getattr(run, "context", None))),
        )  # fmt: skip

    @admin.display(description="Context this attempt was given")
    def context_given(self, run):
        try:
            run_context = run.context
        except RunContext.DoesNotExist:
            return "(none stored: the attempt ended before assembling its context)"
        return format_html('<pre class="context-given">{}</pre>', run_context_text(run_context))


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["id", link_column("message"), "step", link_column("run"), "created_at"]
    list_select_related = ["message", "run"]
    list_filter = ["step"]
    fields = ["message", "run", "step", "created_at", "output_json"]
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Output")
    def output_json(self, checkpoint):
        return json_pre(checkpoint.output)


@admin.register(ReplyChunk)
class ReplyChunkAdmin(ReadOnlyAdmin):
    list_display = ["id", link_column("run"), link_column("message"), "seq", "short_text",
                    "created_at"]  # fmt: skip
    list_select_related = ["run", "message"]
    fields = ["message", "run", "seq", "created_at", "full_text"]
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Text")
    def short_text(self, chunk):
        return short(chunk.text)

    @admin.display(description="Text")
    def full_text(self, chunk):
        return pre(chunk.text)


@admin.register(CrashRecord)
class CrashRecordAdmin(ReadOnlyAdmin):
    list_display = ["id", link_column("conversation"), link_column("message"), link_column("run"),
                    "detected_by", "detected_at", "resolved_at"]  # fmt: skip
    list_select_related = ["conversation", "message", "run"]
    list_filter = ["detected_by", ("resolved_at", admin.EmptyFieldListFilter)]
    fields = ["conversation", "message", "run", "detected_by", "detected_at", "resolved_at"]
    readonly_fields = fields


@admin.register(RunContext)
class RunContextAdmin(ReadOnlyAdmin):
    list_display = ["id", link_column("run"), "estimated_tokens", "created_at"]
    list_select_related = ["run"]
    fields = ["run", "handoff", "checkpoint", "summary", "estimated_tokens", "created_at",
              "identity_text", "facts_json", "turns_json", "pending_json", "rendered"]  # fmt: skip
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Identity")
    def identity_text(self, run_context):
        return pre(run_context.identity)

    @admin.display(description="Facts (ids)")
    def facts_json(self, run_context):
        return json_pre(run_context.facts)

    @admin.display(description="Turns (message ids)")
    def turns_json(self, run_context):
        return json_pre(run_context.turns)

    @admin.display(description="Pending (message ids)")
    def pending_json(self, run_context):
        return json_pre(run_context.pending)

    @admin.display(description="As the brain read it")
    def rendered(self, run_context):
        return format_html('<pre class="context-given">{}</pre>', run_context_text(run_context))


@admin.register(Recovery)
class RecoveryAdmin(ReadOnlyAdmin):
    list_display = ["id", link_column("conversation"), link_column("message"), link_column("run"),
                    link_column("interrupted_run"), "kind", "interrupted_at",
                    "resumed_at"]  # fmt: skip
    list_select_related = ["conversation", "message", "run", "interrupted_run"]
    list_filter = ["kind"]
    fields = ["conversation", "message", "run", "interrupted_run", "kind", "interrupted_at",
              "resumed_at"]  # fmt: skip
    readonly_fields = fields


@admin.register(StaffAction)
class StaffActionAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "kind", "actor_name", link_column("conversation"),
                    link_column("dead_letter", "dead letter"), link_column("alert"),
                    "short_reason"]  # fmt: skip
    list_select_related = ["conversation", "dead_letter", "alert"]
    list_filter = ["kind", "created_at"]
    search_fields = ["actor_name", "reason"]
    fields = ["created_at", "kind", "actor", "actor_name", "reason", "conversation", "dead_letter",
              "alert", "details_json"]  # fmt: skip
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Reason")
    def short_reason(self, action):
        return short(action.reason)

    @admin.display(description="Details")
    def details_json(self, action):
        return json_pre(action.details) if action.details else "-"


@admin.register(DeadLetter)
class DeadLetterAdmin(ChangedByActionsAdmin):
    list_display = ["id", link_column("message"), link_column("conversation"), link_column("owner"),
                    "error_class", "status", "created_at"]  # fmt: skip
    list_select_related = ["message", "conversation", "owner"]
    list_filter = ["status", "error_class", "created_at"]
    search_fields = ["owner__username", "payload__text", "reason"]
    fields = ["message", "conversation", "owner", "status", "reason", "error_class", "sent",
              "attempts_made", "retried_as", "resolved_at", "resolved_by", "created_at",
              "audit"]  # fmt: skip
    readonly_fields = fields
    actions = ["retry", "discard"]

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Message as sent")
    def sent(self, dead_letter):
        payload = dead_letter.payload or {}
        return format_html(
            '{}<div class="help">Sent {}, client id {}</div>',
            pre(payload.get("text", "")),
            moment(payload.get("created_at")),
            payload.get("client_id") or "-",
        )

    @admin.display(description="Attempts")
    def attempts_made(self, dead_letter):
        return attempts_table(dead_letter.attempts or [])

    @admin.display(description="Staff actions")
    def audit(self, dead_letter):
        return staff_actions_table(dead_letter.staff_actions.order_by("created_at", "id"))

    @admin.action(permissions=["change"], description="Retry selected dead letters")
    def retry(self, request, queryset):
        items = list(queryset.select_related("message"))
        return confirm_then(
            self, request, items,
            action="retry",
            question=self.question(items, "will be asked again, as a new message at the end of "
                                          "the conversation"),
            button="Retry",
            reason_required=False,
            perform=lambda items, reason: dead_letters_retry(
                dead_letters=items, by=request.user, reason=reason
            ),
            done="Retried {count} {items}: each is asked again at the end of its conversation.",
        )  # fmt: skip

    @admin.action(permissions=["change"], description="Discard selected dead letters")
    def discard(self, request, queryset):
        items = list(queryset.select_related("message"))
        return confirm_then(
            self, request, items,
            action="discard",
            question=self.question(items, "will be closed without an answer; the user sees that "
                                          "the message was discarded"),
            button="Discard",
            reason_required=True,
            perform=lambda items, reason: dead_letters_discard(
                dead_letters=items, by=request.user, reason=reason
            ),
            done="Discarded {count} {items}.",
        )  # fmt: skip

    def question(self, items: list[DeadLetter], outcome: str) -> str:
        pending = sum(item.status == DeadLetter.Status.PENDING for item in items)
        text = f"{pending} {model_ngettext(self.opts, pending)} {outcome}."
        if skipped := len(items) - pending:
            text += f" Left as they are: {skipped} already retried or discarded."
        return text


@admin.register(Alert)
class AlertAdmin(ChangedByActionsAdmin):
    list_display = ["id", "kind", link_column("conversation"), "short_text", "created_at",
                    "acknowledged_at", "acknowledged_by"]  # fmt: skip
    list_select_related = ["conversation", "acknowledged_by"]
    list_filter = ["kind", ("acknowledged_at", admin.EmptyFieldListFilter)]
    search_fields = ["text"]
    fields = ["kind", "conversation", "text", "created_at", "acknowledged_at", "acknowledged_by",
              "audit"]  # fmt: skip
    readonly_fields = fields
    actions = ["acknowledge"]

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Text")
    def short_text(self, alert):
        return short(alert.text)

    @admin.display(description="Staff actions")
    def audit(self, alert):
        return staff_actions_table(alert.staff_actions.order_by("created_at", "id"))

    @admin.action(permissions=["change"], description="Acknowledge selected alerts")
    def acknowledge(self, request, queryset):
        done = 0
        for alert in queryset.order_by("id"):
            try:
                alert_acknowledge(alert=alert, by=request.user)
                done += 1
            except InvalidTransition as error:  # already acknowledged: left as it was
                self.message_user(request, str(error), messages.WARNING)
        self.message_user(
            request,
            f"Acknowledged {done} {model_ngettext(self.opts, done)}.",
            messages.SUCCESS if done else messages.WARNING,
        )


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ["name", "hostname", "pid", "started_at", "last_seen_at", "stopped_at"]

    def has_add_permission(self, request):
        return False  # a worker registers itself when it starts


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ["owner", "key", "value", "created_at", "superseded_at"]
    list_filter = [("superseded_at", admin.EmptyFieldListFilter)]
    search_fields = ["key", "value", "owner__username"]
    # Versions: a changed value is a new row (continuity.context.memory), old runs refer to ids.
    readonly_fields = ["owner", "key", "value", "source_message", "created_at", "superseded_at"]

    def has_add_permission(self, request):
        return False


class HandoffForm(forms.Form):
    current_state = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    critical_context = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5}), required=False, help_text="One per line."
    )
    next_steps = forms.CharField(
        label="Immediate next steps",
        widget=forms.Textarea(attrs={"rows": 5}),
        required=False,
        help_text="One per line, the next one first.",
    )
    decisions = forms.CharField(
        label="Decisions made",
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        help_text="One per line.",
    )
    based_on = forms.IntegerField(widget=forms.HiddenInput, required=False)


class SummaryForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 16}))
    based_on = forms.IntegerField(widget=forms.HiddenInput, required=False)


class VersionedAdmin(admin.ModelAdmin):
    """Versions are read-only; "edit" shows the newest one in a form and saves a new version
    with the staff user as author; any two versions can be diffed."""

    form_class: type[forms.Form]
    date_hierarchy = "created_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # the change page shows a version; the edit view adds the next one

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path(
                "conversation/<int:conversation_id>/edit/",
                self.admin_site.admin_view(self.edit_view),
                name=f"{name}_edit",
            ),
            path("<int:pk>/diff/", self.admin_site.admin_view(self.diff_view), name=f"{name}_diff"),
            *super().get_urls(),
        ]

    def edit_view(self, request, conversation_id):
        if not request.user.has_perm(f"{self.opts.app_label}.add_{self.opts.model_name}"):
            raise PermissionDenied
        conversation = get_object_or_404(Conversation, pk=conversation_id)
        latest = self.latest(conversation.pk)
        form = self.form_class(
            request.POST or None,
            initial={**self.initial(latest), "based_on": latest.version if latest else 0},
        )
        if form.is_valid():
            if form.cleaned_data["based_on"] != (latest.version if latest else 0):
                form.add_error(None, "A newer version was written meanwhile; review it first.")
            else:
                version = self.save_version(request, conversation, latest, form.cleaned_data)
                self.message_user(request, f"Saved {version} (by {request.user}).")
                return redirect(f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                                version.pk)  # fmt: skip
        return TemplateResponse(
            request,
            "admin/continuity/version_edit.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"Edit the {self.opts.verbose_name} of {conversation}",
                "form": form,
                "latest": latest,
                "next_version": (latest.version if latest else 0) + 1,
                "changelist_url": f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
            },
        )

    def diff_view(self, request, pk):
        if not self.has_view_permission(request):
            raise PermissionDenied
        new = get_object_or_404(self.model, pk=pk)
        versions = self.model.objects.filter(conversation_id=new.conversation_id).order_by(
            "-version"
        )
        against = request.GET.get("against")
        old = (
            versions.filter(pk=against).first()
            if against and against.isdigit()
            else versions.filter(version__lt=new.version).first()
        ) or new
        return TemplateResponse(
            request,
            "admin/continuity/version_diff.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": f"{new}: changes since version {old.version}",
                "old": old,
                "versions": versions.exclude(pk=new.pk),
                "lines": versions_diff(
                    old=self.text_of(old),
                    new=self.text_of(new),
                    old_label=f"version {old.version}",
                    new_label=f"version {new.version}",
                ),
                "changelist_url": f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist",
            },
        )

    @admin.display(description="Versions")
    def tools(self, obj):
        name = f"admin:{self.opts.app_label}_{self.opts.model_name}"
        return format_html(
            '<a href="{}">Edit the newest as a new version</a> · '
            '<a href="{}">Changes since the previous version</a>',
            reverse(f"{name}_edit", args=[obj.conversation_id]),
            reverse(f"{name}_diff", args=[obj.pk]),
        )


@admin.register(Handoff)
class HandoffAdmin(VersionedAdmin):
    form_class = HandoffForm
    list_display = ["__str__", "conversation", "version", "reason", "author", "created_at"]
    list_filter = ["reason"]
    search_fields = ["current_state", "next_steps", "conversation__title"]
    fields = ["conversation", "version", "reason", "author", "run", "at_message", "based_on",
              "created_at", "rendered", "tools"]  # fmt: skip
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="As the next attempt reads it")
    def rendered(self, handoff):
        return format_html('<pre class="handoff-markdown">{}</pre>', handoff.markdown())

    def latest(self, conversation_id):
        return handoff_latest(conversation_id=conversation_id)

    def initial(self, latest):
        return handoff_sections(latest)

    def text_of(self, handoff):
        return handoff.markdown()

    def save_version(self, request, conversation, latest, data):
        return handoff_write(
            conversation_id=conversation.pk,
            reason=Handoff.Reason.STAFF_EDIT,
            sections={name: data[name] for name in SECTIONS},
            author=request.user,
        )


@admin.register(Summary)
class SummaryAdmin(VersionedAdmin):
    form_class = SummaryForm
    list_display = ["__str__", "conversation", "version", "covers_through", "author", "created_at"]
    search_fields = ["text", "conversation__title"]
    fields = ["conversation", "version", "covers_through", "author", "run", "created_at", "text",
              "tools"]  # fmt: skip
    readonly_fields = fields

    def latest(self, conversation_id):
        return summary_latest(conversation_id=conversation_id)

    def initial(self, latest):
        return {"text": latest.text if latest else ""}

    def text_of(self, summary):
        return summary.text

    def edit_view(self, request, conversation_id):
        if summary_latest(conversation_id=conversation_id) is None:
            self.message_user(request, "This conversation has no summary yet.", messages.WARNING)
            return redirect("admin:continuity_conversation_change", conversation_id)
        return super().edit_view(request, conversation_id)

    def save_version(self, request, conversation, latest, data):
        return summary_revise(summary=latest, text=data["text"], author=request.user)
