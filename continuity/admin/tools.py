"""The agent's tools: the MCP servers staff register (the hints they override, and per tool
whether its calls ask the person first and how long one may take), and the record of every
call, which is evidence: shown, linked, never edited."""

from __future__ import annotations

from django.contrib import admin

from ..models import McpServer, ToolCall, ToolPolicy
from .base import ReadOnlyAdmin, json_pre, link_column, pre


class ToolPolicyInline(admin.StackedInline):
    model = ToolPolicy
    extra = 1  # stacked, not tabular: each field has its own label (axe)
    fields = ["tool", "approval", "time_limit"]


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ["name", "location", "enabled", "time_limit", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name", "url", "command"]
    fields = ["name", "url", "command", "enabled", "allowed_tools", "hints", "time_limit"]
    inlines = [ToolPolicyInline]


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        link_column("message"),
        "round",
        "tool",
        "source",
        "state",
        "runs",
        "decision",
        "answer",
        "created_at",
    ]
    list_select_related = ["message"]
    list_filter = ["state", "answer", "source", "tool"]
    search_fields = ["tool", "call_id", "key"]
    fields = [
        "message",
        "run",
        "round",
        "position",
        "call_id",
        "tool",
        "source",
        "key",
        "runs_again_safely",
        "state",
        "runs",
        "decision",
        "decided_by",
        "approval_due_at",
        "answer",
        "answered_by",
        "answered_at",
        "created_at",
        "started_at",
        "ended_at",
        "arguments_json",
        "problem",
        "result_text",
        "result_cut",
    ]
    readonly_fields = fields

    class Media:
        css = {"all": ["continuity/admin.css"]}

    @admin.display(description="Arguments")
    def arguments_json(self, call):
        return json_pre(call.arguments)

    @admin.display(description="Result")
    def result_text(self, call):
        return pre(call.result)
