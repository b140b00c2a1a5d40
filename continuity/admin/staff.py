"""What staff act on: dead letters (retry, edit and retry, discard), alerts (acknowledge) and
workers."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin.utils import model_ngettext
from django.utils.html import format_html

from continuity.actions import (
    alert_acknowledge,
    dead_letters_discard,
    dead_letters_retry,
)

from ..errors import InvalidTransition
from ..models import (
    Alert,
    DeadLetter,
    Worker,
)
from .base import (
    ChangedByActionsAdmin,
    attempts_table,
    confirm_then,
    link_column,
    moment,
    pre,
    short,
    staff_actions_table,
)


@admin.register(DeadLetter)
class DeadLetterAdmin(ChangedByActionsAdmin):
    list_display = [
        "id",
        link_column("message"),
        link_column("conversation"),
        link_column("owner"),
        "error_class",
        "status",
        "created_at",
    ]
    list_select_related = ["message", "conversation", "owner"]
    list_filter = ["status", "error_class", "created_at"]
    search_fields = ["owner__username", "payload__text", "reason"]
    fields = [
        "message",
        "conversation",
        "owner",
        "status",
        "reason",
        "error_class",
        "sent",
        "attempts_made",
        "retried_as",
        "resolved_at",
        "resolved_by",
        "created_at",
        "audit",
    ]
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
            self,
            request,
            items,
            action="retry",
            question=self.question(
                items, "will be asked again, as a new message at the end of the conversation"
            ),
            button="Retry",
            reason_required=False,
            perform=lambda items, reason: dead_letters_retry(
                dead_letters=items, by=request.user, reason=reason
            ),
            done="Retried {count} {items}: each is asked again at the end of its conversation.",
        )

    @admin.action(permissions=["change"], description="Discard selected dead letters")
    def discard(self, request, queryset):
        items = list(queryset.select_related("message"))
        return confirm_then(
            self,
            request,
            items,
            action="discard",
            question=self.question(
                items,
                "will be closed without an answer; the user sees that the message was discarded",
            ),
            button="Discard",
            reason_required=True,
            perform=lambda items, reason: dead_letters_discard(
                dead_letters=items, by=request.user, reason=reason
            ),
            done="Discarded {count} {items}.",
        )

    def question(self, items: list[DeadLetter], outcome: str) -> str:
        pending = sum(item.status == DeadLetter.Status.PENDING for item in items)
        text = f"{pending} {model_ngettext(self.opts, pending)} {outcome}."
        if skipped := len(items) - pending:
            text += f" Left as they are: {skipped} already retried or discarded."
        return text


@admin.register(Alert)
class AlertAdmin(ChangedByActionsAdmin):
    list_display = [
        "id",
        "kind",
        link_column("conversation"),
        "short_text",
        "created_at",
        "acknowledged_at",
        "acknowledged_by",
    ]
    list_select_related = ["conversation", "acknowledged_by"]
    list_filter = ["kind", ("acknowledged_at", admin.EmptyFieldListFilter)]
    search_fields = ["text"]
    fields = [
        "kind",
        "conversation",
        "text",
        "created_at",
        "acknowledged_at",
        "acknowledged_by",
        "audit",
    ]
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
