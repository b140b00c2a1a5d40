"""A conversation and its messages: the questions people ask and the replies to them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Conversation(models.Model):
    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        PAUSED = "paused", "Paused"
        # A person from support answers instead of the agent until they hand it back.
        TAKEN_OVER = "taken_over", "Taken over by support"
        # A tool call was cut off by a crash and may or may not have acted: nothing is answered
        # until its owner chooses Run again or Skip (new messages queue meanwhile).
        DECIDING = "deciding", "Waiting for its owner's decision on a tool call"

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
        TOOL_SERVER = "tool_server", "A tool server, which could not be reached"
        APPROVAL = "approval", "Its owner's approval of a tool call, until its deadline"

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
    time_zone = models.CharField(
        max_length=64,
        blank=True,
        help_text="Its owner's time zone, as their browser last named it: what their reminders' "
        "times mean. Empty: UTC.",
    )
    unread_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Something came while its owner was away (a reminder): the sidebar marks it "
        "until they open it.",
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

    WAITING_STATES = (State.QUEUED, State.PROCESSING)

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
                name="message_waiting",
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
