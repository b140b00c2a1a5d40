"""What the agent did to the world: a row per tool call, committed before the call runs."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from .attempts import Run
from .conversations import Message

# The built-in tools' calls in the page's words: while they run, and once they ended.
TOOL_LABELS = {
    "search_conversations": ("Searching your conversations", "Searched your conversations"),
    "remember": ("Remembering a fact", "Remembered a fact"),
    "forget": ("Forgetting a fact", "Forgot a fact"),
    "calculate": ("Calculating", "Calculated"),
    "set_reminder": ("Setting a reminder", "Set a reminder"),
}


# How a call ended, as the console and /metrics count it: its state, and an error past its
# time limit apart.
TOOL_OUTCOMES = ("done", "error", "timeout", "in_doubt", "skipped", "denied", "expired")


class ToolCall(models.Model):
    """One call the model asked for in one round of a reply. Recorded (pending) in the
    transaction that checkpoints its round, so a crash before that commit leaves no call, and
    the round is asked again; marked running, committed, before it runs; then done or error
    with its result. A call found running by a later attempt was cut off by a crash: a tool
    that runs again safely runs again with the same key, any other is in doubt, and its
    conversation waits for its owner's Run again or Skip.

    A call whose tool's policy asks first is recorded awaiting its owner's approval, until
    `approval_due_at`: allowed, it is pending; denied (by its owner, by a new message or Stop),
    or not answered in time, it ends without running, and the model reads why."""

    class State(models.TextChoices):
        AWAITING = "awaiting", "Waiting for approval"
        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        ERROR = "error", "Error"
        IN_DOUBT = "in_doubt", "In doubt"
        SKIPPED = "skipped", "Skipped"
        DENIED = "denied", "Denied"
        EXPIRED = "expired", "Not approved in time"

    ENDED_STATES = (State.DONE, State.ERROR, State.SKIPPED, State.DENIED, State.EXPIRED)

    class Answer(models.TextChoices):
        NONE = "", "Not asked"
        ALLOW = "allow", "Allowed"
        ALLOW_HERE = "allow_conversation", "Allowed for this conversation"
        DENY = "deny", "Denied"
        MOVED_ON = "moved_on", "Denied: a new message was sent"
        STOPPED = "stopped", "Denied: Stop was pressed"
        TIMED_OUT = "timed_out", "Not approved in time"
        SUPPORT_ANSWERED = "support_answered", "Denied: support answered instead"

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
    timed_out = models.BooleanField(
        default=False, help_text="It ran past its time limit (then ended as an error, or in doubt)."
    )
    decision = models.CharField(
        max_length=16, choices=Decision.choices, blank=True, default=Decision.NONE
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    progress = models.FloatField(
        null=True, blank=True, help_text="What the server last said of its progress while it ran."
    )
    progress_total = models.FloatField(null=True, blank=True)
    progress_message = models.CharField(max_length=200, blank=True)
    approval_due_at = models.DateTimeField(
        null=True, blank=True, help_text="Asked first: denied if not answered by then."
    )
    answer = models.CharField(max_length=24, choices=Answer.choices, blank=True, default="")
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_at = models.DateTimeField(null=True, blank=True)
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
            ),
            # The console's Tools page: the calls of the last day or week.
            models.Index(fields=["created_at"], name="tool_call_created"),
            # The few awaiting an answer: the Waiting page, and the sweep that ends them at
            # their deadline.
            models.Index(
                fields=["approval_due_at"],
                condition=models.Q(state="awaiting"),
                name="tool_call_awaiting",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} call {self.pk} ({self.state})"

    @property
    def label(self) -> str:
        """What the call does, in the page's words: "Searched your conversations"."""
        going, done = TOOL_LABELS.get(self.tool, (f"Calling {self.tool}", f"Called {self.tool}"))
        said = done if self.state in self.ENDED_STATES else going
        if self.state in (self.State.DENIED, self.State.EXPIRED):
            said = f"Did not call {self.tool}"
        elif self.state == self.State.AWAITING:
            said = f"Asking to call {self.tool}"
        if self.source and self.source != "built-in":
            said += f" on {self.source}"
        return said

    @property
    def outcome(self) -> str:
        """How it ended, as the console and /metrics count it (TOOL_OUTCOMES)."""
        if self.state == self.State.ERROR and self.timed_out:
            return "timeout"
        return self.state

    @property
    def running_for(self) -> int:
        """Whole seconds since it started, for the page's live count."""
        if self.started_at is None:
            return 0
        return max(0, int((timezone.now() - self.started_at).total_seconds()))

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
    time_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds a call of its tools may take (a tool's policy may say otherwise); "
        "empty: CONTINUITY_TOOL_TIMEOUT.",
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


class ToolPolicy(models.Model):
    """What staff decided for one tool of a server: whether its calls wait for the person's
    approval, and how long one may take."""

    class Approval(models.TextChoices):
        IF_DESTRUCTIVE = "if_destructive", "Ask when the tool may destroy (its destructive hint)"
        ALWAYS = "always", "Always ask"
        NEVER = "never", "Never ask"

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="policies")
    tool = models.CharField(max_length=128, help_text="The tool's name, as the server lists it.")
    approval = models.CharField(
        max_length=16, choices=Approval.choices, default=Approval.IF_DESTRUCTIVE
    )
    time_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Seconds a call may take; empty: the server's.",
    )

    class Meta:
        ordering = ["server", "tool"]
        verbose_name_plural = "tool policies"
        constraints = [
            models.UniqueConstraint(fields=["server", "tool"], name="tool_policy_unique_tool")
        ]

    def __str__(self) -> str:
        return f"{self.server.name}: {self.tool}"


class ToolAllowance(models.Model):
    """The person's *Allow for this conversation*: the tool's later calls in it run without
    asking."""

    conversation = models.ForeignKey(
        "continuity.Conversation", on_delete=models.CASCADE, related_name="tool_allowances"
    )
    source = models.CharField(max_length=128, help_text="The MCP server's name.")
    tool = models.CharField(max_length=128)
    allowed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "source", "tool"], name="tool_allowance_unique_tool"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source}: {self.tool} in conversation {self.conversation_id}"


class ToolServerStatus(models.Model):
    """Whether an MCP server answers, as the whole deployment saw it: a worker that finds it
    unreachable marks it down; the watchdog asks it again, raises one alert once it has been
    down for CONTINUITY_TOOL_SERVER_ALERT_SECONDS, and clears both when it answers."""

    name = models.CharField(max_length=64, unique=True)
    location = models.CharField(max_length=500)
    down_since = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    checked_at = models.DateTimeField(null=True, blank=True, help_text="The watchdog's last ask.")
    alert = models.ForeignKey(
        "continuity.Alert", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        verbose_name_plural = "tool server statuses"

    def __str__(self) -> str:
        return f"{self.name}: {'down' if self.down_since else 'up'}"
