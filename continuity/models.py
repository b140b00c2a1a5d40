"""The continuity engine's records: conversations, their messages, and every processing attempt."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class Conversation(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        PAUSED = "paused", "Paused"
        # A person from support answers instead of the agent until they hand it back.
        TAKEN_OVER = "taken_over", "Taken over by support"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = models.CharField(max_length=200, blank=True)
    client_id = models.UUIDField(
        null=True,
        blank=True,
        help_text="Client id of the first message: a retried 'new conversation' POST finds it.",
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    paused_reason = models.TextField(blank=True)
    PAUSED_BY_STAFF = "Paused by"  # how a staff pause's reason begins: "Paused by opal: …"

    @property
    def paused_by_staff(self) -> bool:
        return self.paused_reason.startswith(self.PAUSED_BY_STAFF)

    retry_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Backoff after a crash or failure: nothing is processed before this moment.",
    )

    class WaitingFor(models.TextChoices):
        ATTEMPT = "", "A failed or crashed attempt's backoff"
        DATABASE = "database", "The database, after an outage"
        MODEL = "model", "The model server, which could not answer"
        MODEL_BUSY = "model_busy", "The model server, busy answering other conversations"

    waiting_for = models.CharField(
        max_length=16,
        choices=WaitingFor.choices,
        blank=True,
        default=WaitingFor.ATTEMPT,
        help_text="What the backoff until retry_at waits for (the page says it).",
    )
    enqueued_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a drain task was last sent for this conversation, or a message accepted "
        "(which sends one unless one waits); empty after a send failed.",
    )
    titled_by_owner = models.BooleanField(
        default=False, help_text="Renamed by its owner: the brain no longer sets the title."
    )
    brain = models.CharField(
        max_length=64,
        blank=True,
        help_text="The brain its owner picked (a CONTINUITY_BRAINS name); empty: CONTINUITY_BRAIN.",
    )
    archived_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Archived by its owner: out of the sidebar, still answered and searchable.",
    )
    taken_over_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The staff member answering it instead of the agent, while taken over.",
    )
    handed_back_at = models.DateTimeField(
        null=True, blank=True, help_text="When support last handed it back to the agent."
    )
    branch_changes = models.PositiveIntegerField(
        default=0,
        help_text="Bumped whenever the shown branch changes (an edit, a regeneration, a switch "
        "of versions): a page that missed the change while offline reloads.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "client_id"], name="conversation_unique_client_id"
            )
        ]
        indexes = [
            models.Index(fields=["owner", "-updated_at"]),
            # The few that wait for their model server: a server's answer after an outage looks
            # for them (continuity.delivery.backends.backend_answered).
            models.Index(
                fields=["waiting_for"],
                condition=~models.Q(waiting_for=""),
                name="conversation_waiting",
            ),
        ]

    def __str__(self) -> str:
        return self.title or f"Conversation {self.pk}"


# A message's three questions, each defined once: for the ORM (`MessageQuerySet`) and for the
# partial indexes below, whose conditions these are. The hand-written statements that rely on
# an index write its condition out (store.messages WAITING and ANSWERED_QUESTION), and
# tests/continuity/test_indexes.py checks that PostgreSQL reads the two as the same.
# A user message that waits for its answer: queued, or being answered.
WAITING = Q(role="user", state__in=["queued", "processing"])
# On the shown branch: not hidden by an edit or a regeneration.
SHOWN = Q(hidden_with__isnull=True)
# A question of the shown branch that was answered: the turns of a context.
ANSWERED_QUESTION = Q(role="user", state="done", hidden_with__isnull=True)


class MessageQuerySet(models.QuerySet):
    def waiting(self) -> MessageQuerySet:
        return self.filter(WAITING)

    def shown(self) -> MessageQuerySet:
        return self.filter(SHOWN)

    def answered_questions(self) -> MessageQuerySet:
        return self.filter(ANSWERED_QUESTION)


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"
        STAFF = "staff", "Support"  # a reply written by a person from support (a takeover)

    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        PROCESSING = "processing", "Processing"
        DONE = "done", "Done"
        DEAD = "dead", "Could not be processed"

    PENDING_STATES = (State.QUEUED, State.PROCESSING)

    objects = MessageQuerySet.as_manager()

    # Not indexed alone: the indexes below that lead with it serve its lookups. One that held
    # a conversation's messages in no useful order let a plan made for any conversation read
    # all of them and sort them for the turns of a context (`store.contexts.QUESTIONS`).
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    text = models.TextField()
    client_id = models.UUIDField(
        null=True, blank=True, help_text="Generated by the browser; a resubmit finds this row."
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Processing attempts started; committed before each attempt's work."
    )
    interruptions = models.PositiveIntegerField(
        default=0,
        help_text="Attempts given back without counting (planned shutdown, database outage); "
        "capped by CONTINUITY_MAX_INTERRUPTIONS so a message cannot loop forever.",
    )
    version = models.PositiveIntegerField(
        default=1, help_text="Bumped on every change so browsers never apply an older rendering."
    )
    reply_to = models.OneToOneField(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="reply",
        help_text="For assistant messages: the user message answered. One reply per message.",
    )
    stopped = models.BooleanField(
        default=False,
        help_text="For a reply: its owner stopped it; the text is what was written until then.",
    )
    stopped_by_staff = models.BooleanField(
        default=False,
        db_default=False,  # raw inserts need not name it
        help_text="For a stopped reply: staff stopped it from the console, not its owner.",
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="For a reply by support: who wrote it.",
    )
    cut_off = models.BooleanField(
        default=False,
        db_default=False,  # raw inserts (the bench's history) need not name it
        help_text="For a reply: the model stopped at its length limit; the text is what it "
        "wrote until then, and the person may ask it to go on.",
    )
    reasked_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reasks",
        help_text="For a message staff sent again from a dead letter: the message it re-asks.",
    )
    version_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="later_versions",
        help_text="For a user message that was edited or whose reply was regenerated: the first "
        "version at this point of the conversation. Each version starts its own branch.",
    )
    hidden_with = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        db_index=False,  # `message_hidden_with` below
        help_text="Empty for the branch that is shown. Otherwise the version whose branch this "
        "message is on: showing that version again shows it again.",
    )
    forgotten_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the person forgot a fact this message stated: from then on the agent "
        "reads neither it nor its reply (no context, summary or prompt has them). The page still "
        "shows both.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            # Led by the client id, for the same reason as `conversation` above.
            models.UniqueConstraint(
                fields=["client_id", "conversation"], name="message_unique_client_id"
            )
        ]
        indexes = [
            models.Index(fields=["conversation", "state", "id"]),
            models.Index(fields=["state", "created_at"]),
            # A conversation's waiting questions, in order (`store.messages.WAITING`): a
            # few rows, so even a plan made for any conversation finds the next one at once.
            models.Index(
                fields=["conversation", "id"],
                condition=WAITING,
                name="message_pending",
            ),
            # The answered questions of the shown branch, by conversation, in order: the turns
            # of a context (`store.messages.ANSWERED_QUESTION`).
            models.Index(
                fields=["conversation", "id"],
                condition=ANSWERED_QUESTION,
                name="message_answered_question",
            ),
            # Messages of hidden branches only, looked up by the version that hid them. An
            # index of every message would tempt the planner, before its statistics exist, to
            # read all of them for the shown branch's `hidden_with IS NULL`.
            models.Index(
                fields=["hidden_with"],
                condition=models.Q(hidden_with__isnull=False),
                name="message_hidden_with",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role} message {self.pk} ({self.state})"


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

    kind = models.CharField(max_length=32, choices=Kind.choices)
    conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
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
            )
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
    pending = models.JSONField(
        default=list, help_text="Ids of messages that arrived and wait behind this one."
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
