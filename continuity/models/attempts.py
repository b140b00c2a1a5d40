"""Attempts on a message: each run, the checkpoints of its steps, and its reply's chunks."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from .conversations import Conversation, Message


class Run(models.Model):
    """One processing attempt of one user message."""

    class State(models.TextChoices):
        RUNNING = "running", "Running"
        COMPLETED = "completed", "Completed"
        CRASHED = "crashed", "Crashed"
        INTERRUPTED = "interrupted", "Interrupted (planned shutdown or database outage)"
        FAILED = "failed", "Failed"
        STOPPED = "stopped", "Stopped by the user"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="runs")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="runs")
    attempt = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    node = models.CharField(max_length=255, blank=True, help_text="Celery node name.")
    incarnation = models.CharField(
        max_length=32,
        blank=True,
        help_text="Id of the worker start that ran this attempt: a restarted node, or a second "
        "worker misconfigured with the same node name, never mistakes it for its own.",
    )
    worker = models.CharField(max_length=255, blank=True, help_text="hostname:pid of the process.")
    # Times that the watchdog compares are taken on the database's clock, never a host's.
    started_at = models.DateTimeField(db_default=Now())
    ended_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(db_default=Now())
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True)

    class Meta:
        # "Run" is the code's and the table's name for it; people read "attempt" everywhere.
        verbose_name = "attempt"
        ordering = ["id"]
        constraints = [
            # The conversation's lease: at most one live attempt, so a conversation is never
            # answered twice in parallel or out of order. The run id is the fencing token.
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(state="running"),
                name="run_one_running_per_conversation",
            )
        ]
        # No index led by the state: a plan made for any state (a fence's `id = %s AND state =
        # %s`) would walk it through every completed run instead of taking the primary key.
        # The watchdog's live attempts are the rows of the lease's index above.
        indexes = [
            # The attempts that ended in five minutes, for the history (delivery/history.py).
            models.Index(
                fields=["ended_at"], condition=Q(ended_at__isnull=False), name="run_ended_at"
            )
        ]

    def __str__(self) -> str:
        return (
            f"Attempt {self.pk} (number {self.attempt} on message {self.message_id}, {self.state})"
        )


class Checkpoint(models.Model):
    """The output of one step of one message, stored once and reused by later attempts."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="checkpoints")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.CharField(max_length=32)
    output = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["message", "step"], name="checkpoint_unique_step")
        ]

    def __str__(self) -> str:
        return f"{self.step} of message {self.message_id}"


class ReplyChunk(models.Model):
    """A piece of a reply as it streamed; browsers replay these after a reconnect."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="reply_chunks")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="reply_chunks")
    seq = models.PositiveIntegerField(help_text="1, 2, 3… within the run: browsers spot gaps.")
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="reply_chunk_unique_seq")
        ]

    def __str__(self) -> str:
        return f"Chunk {self.seq} of attempt {self.run_id}"
