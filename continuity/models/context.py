"""What an attempt's context is made of: the person's facts, the conversation's handoffs and
summaries, the context each attempt read (by reference), and what a resumed one recovered."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from .attempts import Checkpoint, Run
from .conversations import Conversation, Message


class MemoryFactQuerySet(models.QuerySet):
    def current(self) -> MemoryFactQuerySet:
        """The facts the agent knows now; superseded versions stay for the runs that saw them."""
        return self.filter(superseded_at__isnull=True)


class MemoryFact(models.Model):
    """A durable fact about a user (name, goal, preference) that the agent recalls.

    A value is never changed in place: a new value is a new row and the old one is marked
    superseded, so the context of an old run (which refers to fact ids) renders as it was.
    Change facts through `continuity.context.memory`, list them with `objects.current()`.
    """

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memory_facts"
    )
    key = models.CharField(max_length=64)
    value = models.TextField()
    source_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(auto_now=True)
    superseded_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when a newer value replaced this one."
    )

    objects = MemoryFactQuerySet.as_manager()

    class Meta:
        ordering = ["key", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "key"],
                condition=Q(superseded_at__isnull=True),
                name="memory_fact_unique_current_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.value[:40]}"


def sections_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


class Handoff(models.Model):
    """Human-readable working memory of a conversation, injected into the next attempt.

    Versioned: a new version never overwrites an old one, so any run's context can be shown as
    it was, and staff can diff what changed."""

    class Reason(models.TextChoices):
        # Stored under its first name: rows and running workers of an earlier release use it.
        AFTER_REPLY = "end_of_turn", "After a reply"
        PLANNED_SHUTDOWN = "planned_shutdown", "Planned shutdown"
        CRASH_RECOVERY = "crash_recovery", "Crash recovery"
        COMPACTION = "compaction", "Compaction"
        PAUSE = "pause", "Pause"
        STAFF_EDIT = "staff_edit", "Edited by staff"
        USER_CORRECTION = "user_correction", "Corrected by the user"
        FORGOTTEN = "forgotten", "Forgotten by the user"
        SCOPES_SPLIT = "scopes_split", "Goal moved here from the person's memory"
        HANDED_BACK = "handed_back", "Handed back by support"

    # Its sections, in the order a person reads them.
    SECTIONS = ("current_state", "critical_context", "next_steps", "decisions")

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="handoffs"
    )
    version = models.PositiveIntegerField()
    reason = models.CharField(max_length=32, choices=Reason.choices)
    current_state = models.TextField(blank=True)
    critical_context = models.TextField(blank=True, help_text="One point per line.")
    next_steps = models.TextField(blank=True, help_text="One step per line, the next one first.")
    decisions = models.TextField(blank=True, help_text="One decision per line.")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The staff user who wrote it; empty when the engine did.",
    )
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="handoffs"
    )
    at_message = models.ForeignKey(
        Message,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="For a version written outside an attempt (a correction, a staff edit, a pause, "
        "a forget, a hand-back): the newest question of the branch shown when it was written. It "
        "is hidden with that question's branch, and its changes are applied again on the branch "
        "shown instead.",
    )
    based_on = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # never looked up by
        help_text="The version this one was made from: what it changed is the difference.",
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["conversation", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "version"], name="handoff_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"Handoff v{self.version} of conversation {self.conversation_id}"

    def markdown(self) -> str:
        return handoff_markdown(
            written_at=self.created_at,
            current_state=self.current_state,
            critical_context=sections_lines(self.critical_context),
            next_steps=sections_lines(self.next_steps),
            decisions=sections_lines(self.decisions),
        )


def handoff_markdown(
    *,
    written_at,
    current_state: str,
    critical_context: list[str],
    next_steps: list[str],
    decisions: list[str],
) -> str:
    """A handoff as a document: its sections under their headings."""
    lines = [f"## Session Handoff — {written_at:%Y-%m-%dT%H:%M:%SZ}", ""]
    lines += ["### Current State", current_state.strip() or "(nothing recorded)", ""]
    lines += ["### Critical Context"]
    lines += [f"- {item}" for item in critical_context] or ["(none)"]
    lines += ["", "### Immediate Next Steps"]
    lines += [f"{i}. {step}" for i, step in enumerate(next_steps, 1)] or ["(none)"]
    lines += ["", "### Decisions Made"]
    lines += [f"- {item}" for item in decisions] or ["(none)"]
    return "\n".join(lines)


class Summary(models.Model):
    """A compacted summary of a conversation's turns up to `covers_through`, versioned.

    The summarized messages stay for display and audit; only the prompt leaves them out."""

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="summaries"
    )
    version = models.PositiveIntegerField()
    # RESTRICT: a covered message cannot be deleted alone, but with its conversation it can.
    covers_through = models.ForeignKey(
        Message,
        on_delete=models.RESTRICT,
        related_name="+",
        help_text="The user message of the last exchange (question and its reply) it covers; "
        "later exchanges are given verbatim.",
    )
    text = models.TextField()
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The staff user who edited it; empty when the brain wrote it.",
    )
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["conversation", "-version"]
        verbose_name_plural = "summaries"
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "version"], name="summary_unique_version"
            )
        ]

    def __str__(self) -> str:
        return f"Summary v{self.version} of conversation {self.conversation_id}"


class RunContext(models.Model):
    """What one attempt was given, in the startup order, by reference (ids of versioned rows,
    never copies): its size stays the same however long the conversation grows."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="context")
    identity = models.TextField(help_text="Identity and rules, as configured at the time.")
    facts = models.JSONField(default=list, help_text="MemoryFact ids (versions), by key.")
    handoff = models.ForeignKey(
        Handoff, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    checkpoint = models.ForeignKey(
        Checkpoint,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The last task-state checkpoint: the plan of the previous exchange.",
    )
    summary = models.ForeignKey(
        Summary, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    turns = models.JSONField(default=list, help_text="Message ids of the verbatim turns.")
    # Its column keeps the field's earlier name: workers of the release before, still running
    # during a rolling deploy, write it too.
    waiting = models.JSONField(
        default=list,
        db_column="pending",
        help_text="Ids of messages that arrived and wait behind this one.",
    )
    estimated_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"Context of attempt {self.run_id}"


class Recovery(models.Model):
    """An attempt that resumed work an earlier attempt left unfinished: what the user is told
    in the restart banner, at that point of the conversation."""

    class Kind(models.TextChoices):
        CRASH = "crash", "a crash"
        PLANNED_SHUTDOWN = "planned_shutdown", "a planned restart"
        DATABASE_OUTAGE = "database_outage", "a database outage"
        MODEL_UNAVAILABLE = "model_unavailable", "the model server being unavailable"
        FAILED = "failed", "an error"
        PAUSE = "pause", "a pause after repeated crashes"
        TAKEOVER = "takeover", "support taking the conversation over"
        TOOL_SERVER_DOWN = "tool_server_down", "a tool server being unavailable"

    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="recoveries"
    )
    message = models.ForeignKey(
        Message,
        on_delete=models.CASCADE,
        related_name="recoveries",
        help_text="The message being answered when the work was interrupted and resumed.",
    )
    run = models.OneToOneField(
        Run, on_delete=models.CASCADE, related_name="recovery", help_text="The resuming attempt."
    )
    interrupted_run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="+", help_text="The attempt that stopped."
    )
    kind = models.CharField(max_length=32, choices=Kind.choices)
    interrupted_at = models.DateTimeField(help_text="The stopped attempt's last sign of life.")
    resumed_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "recoveries"
        indexes = [models.Index(fields=["resumed_at"])]  # five minutes of them, for the history

    def __str__(self) -> str:
        return f"Recovery of message {self.message_id} after {self.get_kind_display()}"

    @property
    def down_seconds(self) -> float:
        return max(0.0, (self.resumed_at - self.interrupted_at).total_seconds())
