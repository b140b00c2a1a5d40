"""What the agent did to the world: a row per tool call, committed before the call runs."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from .attempts import Run
from .conversations import Message

# The built-in tools' calls in the page's words: while they run, and once they ended.
TOOL_LABELS = {
    "search_conversations": ("Searching your conversations", "Searched your conversations"),
    "remember": ("Remembering a fact", "Remembered a fact"),
    "forget": ("Forgetting a fact", "Forgot a fact"),
    "calculate": ("Calculating", "Calculated"),
}


class ToolCall(models.Model):
    """One call the model asked for in one round of a reply. Recorded (pending) in the
    transaction that checkpoints its round, so a crash before that commit leaves no call, and
    the round is asked again; marked running, committed, before it runs; then done or error
    with its result. A call found running by a later attempt was cut off by a crash: a tool
    that runs again safely runs again with the same key, any other is in doubt, and its
    conversation waits for its owner's Run again or Skip."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        ERROR = "error", "Error"
        IN_DOUBT = "in_doubt", "In doubt"
        SKIPPED = "skipped", "Skipped"

    ENDED_STATES = (State.DONE, State.ERROR, State.SKIPPED)

    class Decision(models.TextChoices):
        NONE = "", "None"
        RUN_AGAIN = "run_again", "Run again"
        SKIP = "skip", "Skip"

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="tool_calls")
    run = models.ForeignKey(
        Run,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="tool_calls",
        help_text="The attempt that recorded it.",
    )
    round = models.PositiveSmallIntegerField(help_text="The reply's round that asked for it: 1, 2…")
    position = models.PositiveSmallIntegerField(help_text="Its place among the round's calls.")
    call_id = models.CharField(max_length=128, help_text="The model's id for the call.")
    tool = models.CharField(max_length=128)
    source = models.CharField(
        max_length=128, help_text="Where the tool lives: “built-in”, or the MCP server's name."
    )
    arguments = models.JSONField(default=dict, blank=True)
    problem = models.TextField(
        blank=True, help_text="Why the call could not be made as asked (its arguments)."
    )
    key = models.UUIDField(
        default=uuid.uuid4,
        unique=True,
        help_text="The idempotency key: the same on every run of this call.",
    )
    runs_again_safely = models.BooleanField(
        default=False, help_text="Read-only or idempotent when recorded: rerun after a crash."
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    runs = models.PositiveSmallIntegerField(default=0, help_text="How many times it was started.")
    result = models.TextField(blank=True, help_text="What the model reads as its result.")
    result_cut = models.BooleanField(
        default=False, help_text="The result was longer than CONTINUITY_TOOL_RESULT_BYTES."
    )
    decision = models.CharField(
        max_length=16, choices=Decision.choices, blank=True, default=Decision.NONE
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["message", "round", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["message", "round", "position"], name="tool_call_unique_place"
            )
        ]
        indexes = [
            # The few in doubt, for the console's Waiting page.
            models.Index(
                fields=["created_at"],
                condition=models.Q(state="in_doubt"),
                name="tool_call_in_doubt",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tool} call {self.pk} ({self.state})"

    @property
    def label(self) -> str:
        """What the call does, in the page's words: "Searched your conversations"."""
        going, done = TOOL_LABELS.get(self.tool, (f"Calling {self.tool}", f"Called {self.tool}"))
        said = done if self.state in self.ENDED_STATES else going
        if self.source and self.source != "built-in":
            said += f" on {self.source}"
        return said

    @property
    def seconds(self) -> float | None:
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


class McpServer(models.Model):
    """An MCP server whose tools the agent may call, registered by staff. Servers come only
    from here and from CONTINUITY_MCP_SERVERS: never from a chat message."""

    name = models.SlugField(max_length=64, unique=True, help_text="How pages and calls name it.")
    url = models.URLField(
        max_length=500, blank=True, help_text="Its streamable HTTP endpoint (…/mcp)."
    )
    command = models.CharField(
        max_length=500,
        blank=True,
        help_text="Or a local command that speaks MCP over its standard input and output "
        "(stdio), as a shell would split it: run for each call.",
    )
    enabled = models.BooleanField(default=True)
    allowed_tools = models.JSONField(
        default=list,
        blank=True,
        help_text="The names of the tools the agent may call; empty: all the server offers.",
    )
    hints = models.JSONField(
        default=dict,
        blank=True,
        help_text="Hints that override the server's, by tool: "
        '{"lookup": {"read_only": true}}; keys read_only, idempotent, destructive, open_world.',
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(url="") & ~models.Q(command=""))
                | (~models.Q(url="") & models.Q(command="")),
                name="mcp_server_url_or_command",
                violation_error_message="Give its URL or its command, not both.",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def location(self) -> str:
        """Where the agent reaches it: its URL, or its command."""
        return self.url or self.command
