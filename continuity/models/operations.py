"""What staff watch and act on: crashes, dead letters, alerts, staff actions, workers, and
the history of what happened."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models.functions import Now

from .attempts import Run
from .conversations import Conversation, Message


class CrashRecord(models.Model):
    class Detector(models.TextChoices):
        WATCHDOG = "watchdog", "Watchdog"
        DRAIN = "drain", "Next drain of the conversation"
        WORKER_START = "worker_start", "Worker start-up scan"
        POOL = "pool", "Its worker, when the pool process died"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="crashes")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="crashes")
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="crash")
    detected_at = models.DateTimeField(db_default=Now())
    detected_by = models.CharField(max_length=16, choices=Detector.choices)
    resolved_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set when the cause was dealt with (message dead-lettered, conversation "
        "resumed); resolved crashes no longer count toward pausing.",
    )

    class Meta:
        ordering = ["-detected_at"]
        indexes = [models.Index(fields=["conversation", "detected_at"])]

    def __str__(self) -> str:
        return f"Crash of attempt {self.run_id} ({self.detected_at:%Y-%m-%d %H:%M:%S})"

    @property
    def noticed_by(self) -> str:
        """Who noticed it, as a sentence says it: "noticed by the watchdog"."""
        return NOTICED_BY.get(self.detected_by) or self.get_detected_by_display()


NOTICED_BY = {
    CrashRecord.Detector.WATCHDOG: "the watchdog",
    CrashRecord.Detector.DRAIN: "the conversation's next drain",
    CrashRecord.Detector.WORKER_START: "its worker's start-up scan",
    CrashRecord.Detector.POOL: "its worker, when the pool process died",
}


class DeadLetter(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for staff"
        RETRIED = "retried", "Retried"
        DISCARDED = "discarded", "Discarded"
        REPLACED = "replaced", "Replaced by the person's edit"

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="dead_letter")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="dead_letters"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dead_letters"
    )
    payload = models.JSONField(help_text="The message as the user sent it.")
    attempts = models.JSONField(
        default=list, help_text="Every attempt: worker, start, end, state, error, traceback."
    )
    reason = models.TextField()
    error_class = models.CharField(
        max_length=100,
        blank=True,
        help_text="What ended the last attempt: an exception class, or a worker crash.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    retried_as = models.OneToOneField(
        Message,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="retried_dead_letter",
        help_text="The new message that re-asks this one at the end of the conversation.",
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "-created_at"]),
            models.Index(fields=["error_class", "-created_at"]),
            models.Index(fields=["created_at"]),  # five minutes of them, for the history
        ]

    def __str__(self) -> str:
        return f"Dead letter for message {self.message_id}"


class Alert(models.Model):
    class Kind(models.TextChoices):
        CONVERSATION_PAUSED = "conversation_paused", "Conversation paused"
        MODEL_UNAVAILABLE = "model_unavailable", "Model server unavailable"
        MODEL_MISSING = "model_missing", "Model not on its server"
        TOOL_SERVER_DOWN = "tool_server_down", "Tool server unreachable"
        NO_WORKER = "no_worker", "No worker running while messages wait"
        DEAD_LETTER = "dead_letter", "Message set aside"
        CRASH_BURST = "crash_burst", "Burst of crashes"

    kind = models.CharField(max_length=32, choices=Kind.choices)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    dead_letter = models.ForeignKey(
        "DeadLetter",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alerts",
        help_text="The message set aside: its alert clears once staff retry or discard it.",
    )
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["acknowledged_at", "-created_at"])]
        constraints = [
            # A wrong model name is said once until staff acknowledge it, also when several
            # workers start at the same moment and each finds it (`backend_misconfigured`).
            models.UniqueConstraint(
                fields=["kind", "text"],
                condition=models.Q(kind="model_missing", acknowledged_at__isnull=True),
                name="alert_one_open_model_missing_per_problem",
            ),
            # Raised by the watchdog's sweep: one open at a time, whichever sweep finds it.
            models.UniqueConstraint(
                fields=["kind"],
                condition=models.Q(
                    kind__in=["no_worker", "crash_burst"], acknowledged_at__isnull=True
                ),
                name="alert_one_open_watchdog_alert",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.text[:60]}"


class StaffAction(models.Model):
    """The audit log of the staff console and admin: who did what to which record, and why."""

    class Kind(models.TextChoices):
        RETRY = "retry", "Retried"
        EDIT_AND_RETRY = "edit_and_retry", "Edited and retried"
        DISCARD = "discard", "Discarded"
        REPLACED_BY_EDIT = "replaced_by_edit", "Replaced by the person's edit"
        RESUME = "resume", "Resumed the conversation"
        PAUSE = "pause", "Paused the conversation"
        STOP = "stop", "Stopped a reply being written"
        RETRY_NOW = "retry_now", "Ended the conversation's wait (retry now)"
        ACKNOWLEDGE = "acknowledge", "Acknowledged the alert"
        WORKER_SHUTDOWN = "worker_shutdown", "Shut a worker down gracefully"
        POOL_GROW = "pool_grow", "Grew a worker's pool"
        POOL_SHRINK = "pool_shrink", "Shrank a worker's pool"
        POOL_RESTART = "pool_restart", "Restarted a worker's pool"
        TAKE_OVER = "take_over", "Took the conversation over"
        STAFF_REPLY = "staff_reply", "Replied as support"
        HAND_BACK = "hand_back", "Handed the conversation back"

    kind = models.CharField(max_length=32, choices=Kind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_name = models.CharField(
        max_length=150, help_text="The username at the time: kept if the account goes."
    )
    reason = models.TextField(blank=True)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="staff_actions"
    )
    dead_letter = models.ForeignKey(
        DeadLetter, null=True, blank=True, on_delete=models.CASCADE, related_name="staff_actions"
    )
    alert = models.ForeignKey(
        Alert, null=True, blank=True, on_delete=models.CASCADE, related_name="staff_actions"
    )
    # Kept when the worker's row goes: its name stays in `details`.
    worker = models.ForeignKey(
        "Worker", null=True, blank=True, on_delete=models.SET_NULL, related_name="staff_actions"
    )
    details = models.JSONField(
        default=dict, blank=True, help_text="For an edit: the original and the corrected text."
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} by {self.actor_name}"


class Worker(models.Model):
    """A Celery worker node as it announced itself."""

    name = models.CharField(max_length=255, unique=True, help_text="Celery node name.")
    incarnation = models.CharField(max_length=32, blank=True, help_text="Id of the latest start.")
    hostname = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return self.name


class HistoryBucket(models.Model):
    """Five minutes of what happened, counted once they are over (`delivery/history.py`):
    the console's history charts and /metrics' counters read these, which retention keeps, so
    neither slows down with the rows nor falls when old rows are deleted."""

    start = models.DateTimeField(unique=True, help_text="UTC, on a five-minute boundary.")
    rolled_up = models.BooleanField(
        default=False, help_text="Counted: the five minutes are over and their rows were read."
    )
    answered = models.PositiveIntegerField(default=0, help_text="Replies stored.")
    reply_seconds = models.FloatField(default=0, help_text="Their times from message to reply.")
    replies_within = models.JSONField(
        default=list,
        help_text="Replies per bound of history.REPLY_BOUNDS_SECONDS (the last: beyond them).",
    )
    attempts = models.JSONField(default=dict, help_text="Attempts ended, by outcome.")
    recoveries = models.PositiveIntegerField(default=0)
    dead_letters = models.PositiveIntegerField(default=0)
    tool_calls = models.JSONField(
        default=dict, help_text="Tool calls ended, by tool, then by outcome (TOOL_OUTCOMES)."
    )
    tool_seconds = models.JSONField(default=dict, help_text="Their run times, by tool.")
    tool_seconds_within = models.JSONField(
        default=dict,
        help_text="Their runs per bound of history.TOOL_BOUNDS_SECONDS, by tool (the last: "
        "beyond them).",
    )
    queue_depth = models.PositiveIntegerField(
        null=True, blank=True, help_text="The most messages waiting at one sample."
    )
    totals = models.JSONField(
        default=dict, help_text="The counts above summed over every bucket through this one."
    )

    class Meta:
        ordering = ["start"]

    def __str__(self) -> str:
        return f"History from {self.start:%Y-%m-%d %H:%M} UTC"
