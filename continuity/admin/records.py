"""The engine's records: conversations and messages (changed only through actions), and the
evidence of what happened (attempts, checkpoints, chunks, crashes, contexts, recoveries, the
audit log of staff actions), shown, linked, never edited."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import model_ngettext
from django.db.models.functions import Left
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from continuity.actions import (
    conversations_resume,
)
from continuity.context import (
    run_context_text,
)

from ..models import (
    Alert,
    Checkpoint,
    Conversation,
    CrashRecord,
    DeadLetter,
    Handoff,
    Message,
    Recovery,
    ReplyChunk,
    Run,
    RunContext,
    StaffAction,
)
from .base import (
    ReadOnlyAdmin,
    ReadOnlyInline,
    admin_link,
    changelist_link,
    confirm_then,
    counted,
    json_pre,
    link_column,
    newest_of_each_conversation,
    pre,
    related_links,
    short,
    timeline_link,
    traceback_details,
)


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
    fields = [
        "id",
        "message",
        "attempt",
        "state",
        "worker",
        "started_at",
        "ended_at",
        "short_error",
    ]
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
        "state",
        "paused_reason",
        "retry_at",
        "client_id",
        "enqueued_at",
        "archived_at",
        "unread_at",
        "time_zone",
        "created_at",
        "updated_at",
        "branch_changes",
        "history",
        "context_tools",
        "taken_over_by",
        "handed_back_at",
        "waiting",
    ]
    exclude = ["waiting_for"]  # said by `waiting`, which knows when nothing is waited for
    inlines = [MessageInline, RunInline, HandoffInline]
    actions = ["resume"]

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Waiting for")
    def waiting(self, conversation):
        if conversation.retry_at is None:
            return "Nothing: no backoff is set"
        return conversation.get_waiting_for_display()

    @admin.display(description="History")
    def history(self, conversation):
        if conversation.pk is None:
            return "-"
        return related_links(
            *(
                (
                    label,
                    changelist_link(
                        model,
                        counted(related.count(), noun, plural),
                        conversation__id__exact=conversation.pk,
                    ),
                )
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
        )

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
            self,
            request,
            items,
            action="resume",
            question=question,
            button="Resume",
            reason_required=True,
            perform=lambda items, reason: conversations_resume(
                items, by=request.user, reason=reason
            ),
            done="Resumed {count} {items}.",
        )


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["id", link_column("conversation"), "role", "state", "attempts", "created_at"]
    list_select_related = ["conversation"]
    list_filter = ["state", "role"]
    search_fields = ["text"]
    # Messages come from people and the agent, through the services: staff read or delete them
    # (moderation), and correct a failed one through its dead letter's edit and retry.
    readonly_fields = [
        "conversation",
        "role",
        "text",
        "state",
        "attempts",
        "interruptions",
        "version",
        "client_id",
        "reply_to",
        "reasked_from",
        "version_of",
        "hidden_with",
        "forgotten_at",
        "author",
        "created_at",
        "updated_at",
        "related",
    ]

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
            (
                "Checkpoints",
                changelist_link(
                    Checkpoint, counted(message.checkpoints.count(), "checkpoint"), **of_it
                ),
            ),
            ("Dead letter", admin_link(getattr(message, "dead_letter", None))),
            ("Reply", admin_link(getattr(message, "reply", None))),
            ("Reply to", admin_link(message.reply_to)),
            ("Re-asks", admin_link(message.reasked_from)),
            (
                "Re-asked as",
                format_html_join(
                    ", ", "{}", ((admin_link(reask),) for reask in message.reasks.order_by("id"))
                ),
            ),
        )


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
    list_display = [
        "id",
        link_column("message"),
        link_column("conversation"),
        "attempt",
        "state",
        "worker",
        "started_at",
        "ended_at",
    ]
    list_select_related = ["message", "conversation"]
    list_filter = ["state"]
    search_fields = ["worker", "node", "error"]
    fields = [
        "message",
        "conversation",
        "attempt",
        "state",
        "node",
        "incarnation",
        "worker",
        "started_at",
        "heartbeat_at",
        "ended_at",
        "error_text",
        "traceback_text",
        "related",
        "context_given",
    ]
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Related")
    def related(self, run):
        of_it = {"run__id__exact": run.pk}
        return related_links(
            ("Its message's timeline", timeline_link(run.message)),
            (
                "Checkpoints",
                changelist_link(
                    Checkpoint, counted(run.checkpoints.count(), "checkpoint"), **of_it
                ),
            ),
            (
                "Reply chunks",
                changelist_link(ReplyChunk, counted(run.reply_chunks.count(), "chunk"), **of_it),
            ),
            ("Crash record", admin_link(getattr(run, "crash", None))),
            ("Resumes after", admin_link(getattr(run, "recovery", None))),
            ("Resumed by", admin_link(Recovery.objects.filter(interrupted_run=run).first())),
            ("Context", admin_link(getattr(run, "context", None))),
        )

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
    list_display = [
        "id",
        link_column("run"),
        link_column("message"),
        "seq",
        "short_text",
        "created_at",
    ]
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
    list_display = [
        "id",
        link_column("conversation"),
        link_column("message"),
        link_column("run"),
        "detected_by",
        "detected_at",
        "resolved_at",
    ]
    list_select_related = ["conversation", "message", "run"]
    list_filter = ["detected_by", ("resolved_at", admin.EmptyFieldListFilter)]
    fields = ["conversation", "message", "run", "detected_by", "detected_at", "resolved_at"]
    readonly_fields = fields


@admin.register(RunContext)
class RunContextAdmin(ReadOnlyAdmin):
    list_display = ["id", link_column("run"), "estimated_tokens", "created_at"]
    list_select_related = ["run"]
    fields = [
        "run",
        "handoff",
        "checkpoint",
        "summary",
        "estimated_tokens",
        "created_at",
        "identity_text",
        "facts_json",
        "turns_json",
        "waiting_json",
        "rendered",
    ]
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

    @admin.display(description="Waiting (message ids)")
    def waiting_json(self, run_context):
        return json_pre(run_context.waiting)

    @admin.display(description="As the brain read it")
    def rendered(self, run_context):
        return format_html('<pre class="context-given">{}</pre>', run_context_text(run_context))


@admin.register(Recovery)
class RecoveryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        link_column("conversation"),
        link_column("message"),
        link_column("run"),
        link_column("interrupted_run"),
        "kind",
        "interrupted_at",
        "resumed_at",
    ]
    list_select_related = ["conversation", "message", "run", "interrupted_run"]
    list_filter = ["kind"]
    fields = [
        "conversation",
        "message",
        "run",
        "interrupted_run",
        "kind",
        "interrupted_at",
        "resumed_at",
    ]
    readonly_fields = fields


@admin.register(StaffAction)
class StaffActionAdmin(ReadOnlyAdmin):
    list_display = [
        "created_at",
        "kind",
        "actor_name",
        link_column("conversation"),
        link_column("dead_letter", "dead letter"),
        link_column("alert"),
        "short_reason",
    ]
    list_select_related = ["conversation", "dead_letter", "alert"]
    list_filter = ["kind", "created_at"]
    search_fields = ["actor_name", "reason"]
    fields = [
        "created_at",
        "kind",
        "actor",
        "actor_name",
        "reason",
        "conversation",
        "dead_letter",
        "alert",
        "details_json",
    ]
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Reason")
    def short_reason(self, action):
        return short(action.reason)

    @admin.display(description="Details")
    def details_json(self, action):
        return json_pre(action.details) if action.details else "-"
