from __future__ import annotations

from django.contrib import admin, messages

from .delivery.conversations import conversation_resume
from .errors import InvalidTransition
from .models import (
    Alert,
    Checkpoint,
    Conversation,
    CrashRecord,
    DeadLetter,
    MemoryFact,
    Message,
    Run,
    Worker,
)


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "owner", "state", "retry_at", "updated_at"]
    list_filter = ["state"]
    search_fields = ["title", "owner__username"]
    # Lifecycle fields change only through services (the resume action), never by hand.
    readonly_fields = [
        "state", "paused_reason", "retry_at", "client_id", "enqueued_at", "created_at",
        "updated_at",
    ]  # fmt: skip
    actions = ["resume"]

    @admin.action(permissions=["change"], description="Resume selected paused conversations")
    def resume(self, request, queryset):
        resumed = 0
        for conversation in queryset:
            try:
                conversation_resume(conversation=conversation, by=request.user)
                resumed += 1
            except InvalidTransition as error:
                self.message_user(request, str(error), messages.WARNING)
        self.message_user(request, f"{resumed} conversation(s) resumed.", messages.SUCCESS)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["id", "conversation", "role", "state", "attempts", "created_at"]
    list_filter = ["state", "role"]
    search_fields = ["text"]
    raw_id_fields = ["conversation", "reply_to"]
    readonly_fields = ["state", "attempts", "version", "client_id"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "message", "attempt", "state", "worker", "started_at", "ended_at"]
    list_filter = ["state"]
    raw_id_fields = ["conversation", "message"]
    readonly_fields = ["state", "heartbeat_at", "ended_at"]


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    list_display = ["id", "message", "step", "run", "created_at"]
    list_filter = ["step"]
    raw_id_fields = ["message", "run"]


@admin.register(CrashRecord)
class CrashRecordAdmin(admin.ModelAdmin):
    list_display = ["id", "conversation", "message", "detected_by", "detected_at", "resolved_at"]
    list_filter = ["detected_by"]
    raw_id_fields = ["conversation", "message", "run"]


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin):
    list_display = ["id", "message", "conversation", "owner", "status", "created_at"]
    list_filter = ["status"]
    raw_id_fields = ["message", "conversation", "owner"]


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "conversation", "created_at", "acknowledged_at"]
    list_filter = ["kind"]


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ["name", "hostname", "pid", "started_at", "last_seen_at", "stopped_at"]


@admin.register(MemoryFact)
class MemoryFactAdmin(admin.ModelAdmin):
    list_display = ["owner", "key", "value", "updated_at"]
    search_fields = ["key", "value", "owner__username"]
