"""Read models of the staff console: live state, queue figures and crash history."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis
from django.conf import settings
from django.db import connection
from django.db.models import (
    Aggregate,
    Case,
    CharField,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import Now, TruncHour
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from continuity.context import run_context_text
from continuity.database.clock import db_now_plus
from continuity.delivery import redis_client, stale_before
from continuity.models import (
    Alert,
    Conversation,
    CrashRecord,
    DeadLetter,
    Message,
    Recovery,
    Run,
    RunContext,
    StaffAction,
    ToolCall,
    Worker,
)


def workers_live() -> Q:
    """A node is live while it heartbeats: the same staleness rule the watchdog applies to runs."""
    return Q(stopped_at__isnull=True, last_seen_at__gte=stale_before())


def no_worker_alert() -> Alert | None:
    """The watchdog's open alert that no worker runs while messages wait."""
    return Alert.objects.filter(kind=Alert.Kind.NO_WORKER, acknowledged_at__isnull=True).first()


def workers_overview() -> QuerySet[Worker]:
    return Worker.objects.annotate(
        status=Case(
            When(stopped_at__isnull=False, then=Value("stopped")),
            When(workers_live(), then=Value("live")),
            default=Value("stale"),
            output_field=CharField(),
        ),
        seen_ago=age_of(field="last_seen_at"),
    ).order_by("stopped_at", "name")


def age_of(*, field: str) -> ExpressionWrapper:
    """How long ago, on the database's clock: the one clock every host agrees on."""
    return ExpressionWrapper(Now() - F(field), output_field=DurationField())


def running_attempts() -> QuerySet[Run]:
    return (
        Run.objects.filter(state=Run.State.RUNNING)
        .select_related("message", "conversation")
        .annotate(
            heartbeat_age=age_of(field="heartbeat_at"), running_for=age_of(field="started_at")
        )
        .order_by("started_at")
    )


def waiting_messages() -> QuerySet[Message]:
    return Message.objects.waiting()


@dataclass(frozen=True)
class QueueFigures:
    waiting: int
    oldest_waiting_age: timedelta | None
    broker_queued: int | None  # None when Redis does not answer


def queue_figures() -> QueueFigures:
    figures = waiting_messages().aggregate(waiting=Count("pk"), oldest_age=oldest_age())
    return QueueFigures(
        waiting=figures["waiting"],
        oldest_waiting_age=figures["oldest_age"],
        broker_queued=broker_queue_length(),
    )


def oldest_age(*, among: Q | None = None) -> ExpressionWrapper:
    """For an aggregate: how long ago the oldest row (of those `among` keeps) was created, on
    the database's clock; None when there is none."""
    return ExpressionWrapper(Now() - Min("created_at", filter=among), output_field=DurationField())


def broker_queue_length() -> int | None:
    try:
        return int(redis_client().llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    except redis.RedisError:
        return None


@dataclass(frozen=True)
class ReplyFigures:
    answered: int
    p50: timedelta | None
    p95: timedelta | None


class PercentileCont(Aggregate):
    """PostgreSQL's percentile_cont: the value at that fraction of the ordered values,
    interpolated between the two nearest. SQLite has none: see `percentile_by_offset`."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression, *, fraction: float, **extra) -> None:
        super().__init__(expression, fraction=float(fraction), **extra)


def reply_figures(*, within: timedelta = timedelta(hours=1)) -> ReplyFigures:
    """Messages answered within the period, and the time from accept to reply."""
    replies = Message.objects.filter(
        role=Message.Role.ASSISTANT,
        reply_to__isnull=False,
        created_at__gte=db_now_plus(-within),
    ).annotate(
        delay=ExpressionWrapper(F("created_at") - F("reply_to__created_at"), DurationField())
    )
    if connection.vendor == "postgresql":
        figures = replies.aggregate(
            answered=Count("pk"),
            p50=PercentileCont("delay", fraction=0.5),
            p95=PercentileCont("delay", fraction=0.95),
        )
        return ReplyFigures(**figures)
    answered = replies.count()
    return ReplyFigures(
        answered=answered,
        p50=percentile_by_offset(rows=replies, field="delay", fraction=0.5, count=answered),
        p95=percentile_by_offset(rows=replies, field="delay", fraction=0.95, count=answered),
    )


def percentile_by_offset(
    *, rows: QuerySet, field: str, fraction: float, count: int
) -> timedelta | None:
    """percentile_cont computed from the one or two rows around the fraction's position, read
    in order by offset: the same value PostgreSQL gives, on databases that lack the aggregate."""
    if not count:
        return None
    position = fraction * (count - 1)
    below = math.floor(position)
    nearest = list(rows.order_by(field).values_list(field, flat=True)[below : below + 2])
    if len(nearest) == 1:
        return nearest[0]
    low, high = nearest
    return low + (high - low) * (position - below)


@dataclass(frozen=True)
class AbsorbedFigures:
    retried_attempts: int  # attempts after the first: each one a failure the user did not see
    recoveries: int  # interrupted work resumed from checkpoints (crash, restart, outage)


def absorbed_figures(*, within: timedelta = timedelta(hours=24)) -> AbsorbedFigures:
    since = timezone.now() - within
    return AbsorbedFigures(
        retried_attempts=Run.objects.filter(started_at__gte=since, attempt__gt=1).count(),
        recoveries=Recovery.objects.filter(resumed_at__gte=since).count(),
    )


@dataclass(frozen=True)
class OpenFigures:
    dead_letters: int
    paused_conversations: int
    alerts: int


def open_figures() -> OpenFigures:
    return OpenFigures(
        dead_letters=DeadLetter.objects.filter(status=DeadLetter.Status.PENDING).count(),
        paused_conversations=Conversation.objects.filter(state=Conversation.State.PAUSED).count(),
        alerts=Alert.objects.filter(acknowledged_at=None).count(),
    )


@dataclass(frozen=True)
class TimelineBar:
    start: datetime
    crashes: int


def crash_timeline(*, hours: int = 24, crashes: QuerySet[CrashRecord] | None = None):
    """Crashes per hour over the last `hours`, oldest first, empty hours included."""
    now = timezone.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    first = now - timedelta(hours=hours - 1)
    crashes = CrashRecord.objects.all() if crashes is None else crashes
    counts = dict(
        crashes.filter(detected_at__gte=first)
        .annotate(hour=TruncHour("detected_at", tzinfo=UTC))
        .values_list("hour")
        .annotate(n=Count("pk"))
        .values_list("hour", "n")
    )
    return [
        TimelineBar(start=hour, crashes=counts.get(hour, 0))
        for hour in (first + timedelta(hours=i) for i in range(hours))
    ]


@dataclass(frozen=True)
class Waiting:
    """A conversation with messages waiting to be answered, and why they wait."""

    conversation: Conversation
    queued: int
    waited: timedelta  # since its oldest waiting message was sent
    why: str
    next_try_in: timedelta | None  # until the backoff ends, when one is set
    can_retry_now: bool
    can_pause: bool


WAITING_FOR_WORDS = {
    Conversation.WaitingFor.MODEL: "The model server is unavailable",
    Conversation.WaitingFor.MODEL_BUSY: "The model server is busy with other conversations",
    Conversation.WaitingFor.DATABASE: "The database was unavailable",
    Conversation.WaitingFor.TOOL_SERVER: "A tool server could not be reached",
    Conversation.WaitingFor.ATTEMPT: "Backing off after a failed or crashed attempt",
}


def waiting_conversations() -> QuerySet[Conversation]:
    """Every conversation with a user message still queued, the longest waiting first, with
    what the Waiting page shows of it (times on the database's clock)."""
    queued = Q(
        messages__role=Message.Role.USER,
        messages__state=Message.State.QUEUED,
        messages__hidden_with__isnull=True,
    )
    return (
        Conversation.objects.filter(queued)
        .select_related("owner", "taken_over_by")
        .annotate(
            queued_count=Count("messages", filter=queued, distinct=True),
            waited=ExpressionWrapper(
                Now() - Min("messages__created_at", filter=queued),
                output_field=DurationField(),
            ),
            backoff_left=ExpressionWrapper(F("retry_at") - Now(), output_field=DurationField()),
            answering=Exists(
                Run.objects.filter(conversation=OuterRef("pk"), state=Run.State.RUNNING)
            ),
        )
        .order_by("-waited", "pk")
    )


def waiting_of(*, conversation: Conversation) -> Waiting:
    """One row of the Waiting page, from a conversation of `waiting_conversations()`."""
    left = conversation.backoff_left
    backing_off = left is not None and left > timedelta(0)
    active = conversation.state == Conversation.State.ACTIVE
    if conversation.state == Conversation.State.TAKEN_OVER:
        who = conversation.taken_over_by.get_username() if conversation.taken_over_by else "staff"
        why = f"Taken over by {who}: support answers, the assistant waits"
    elif conversation.state == Conversation.State.DECIDING:
        doubted = ToolCall.objects.filter(
            message__conversation=conversation, state=ToolCall.State.IN_DOUBT
        ).values_list("tool", flat=True)
        why = (
            f"A tool call in doubt ({', '.join(doubted) or 'none left'}): a crash cut it off, "
            "and its owner chooses Run again or Skip"
        )
    elif not active:
        why = conversation.paused_reason or "Paused"
    elif conversation.answering:
        why = "Its turn: an earlier message is being answered"
    elif backing_off and conversation.waiting_for == Conversation.WaitingFor.APPROVAL:
        asked = ToolCall.objects.filter(
            message__conversation=conversation, state=ToolCall.State.AWAITING
        ).values_list("tool", flat=True)
        why = (
            f"Waiting for its owner's approval of a tool call ({', '.join(asked) or 'answered'}): "
            "denied at its deadline or at their next message. Take it over to answer for them"
        )
    elif backing_off or conversation.waiting_for:
        why = WAITING_FOR_WORDS[conversation.waiting_for]
    else:
        why = "Its turn in the queue: the next free worker takes it"
    return Waiting(
        conversation=conversation,
        queued=conversation.queued_count,
        waited=conversation.waited,
        why=why,
        next_try_in=left if active and backing_off else None,
        # Retry now would only ask again: the owner's answer, not a wait, holds it.
        can_retry_now=active
        and backing_off
        and not conversation.answering
        and conversation.waiting_for != Conversation.WaitingFor.APPROVAL,
        can_pause=active,
    )


def crashes_within(*, hours: int) -> QuerySet[CrashRecord]:
    """The crashes detected in the last `hours`, newest first (the model's order)."""
    return CrashRecord.objects.filter(
        detected_at__gte=db_now_plus(-timedelta(hours=hours))
    ).select_related("conversation", "message", "run")


def paused_conversations() -> QuerySet[Conversation]:
    """Paused conversations, the most recently paused first, with their open crashes."""
    return (
        Conversation.objects.filter(state=Conversation.State.PAUSED)
        .select_related("owner")
        .annotate(
            open_crashes=Count("crashes", filter=Q(crashes__resolved_at=None), distinct=True),
            last_crash=Max("crashes__detected_at"),
            paused_at=Max("alerts__created_at"),
        )
        .order_by("-paused_at", "-id")
    )


def conversation_record(*, conversation: Conversation) -> dict[str, QuerySet]:
    """What staff read of one conversation's past: its crashes, attempts, alerts, dead letters
    and staff actions, the newest of each."""
    return {
        "crashes": conversation.crashes.select_related("message", "run")[:200],
        "runs": conversation.runs.select_related("message").order_by("-id")[:50],
        "alerts": conversation.alerts.all()[:50],
        "dead_letters": conversation.dead_letters.all()[:50],
        "actions": StaffAction.objects.filter(conversation=conversation)[:100],
    }


def alerts_shown(*, show: str) -> QuerySet[Alert]:
    """The alerts a staff member asked for: "open", "acknowledged", or any other value for all."""
    found = Alert.objects.select_related("conversation", "acknowledged_by")
    if show == "open":
        return found.filter(acknowledged_at=None)
    if show == "acknowledged":
        return found.exclude(acknowledged_at=None)
    return found


def dead_letter_error_classes() -> list[str]:
    """The error classes of the dead letters there are, for the filter's choices."""
    return list(
        DeadLetter.objects.exclude(error_class="")
        .order_by("error_class")
        .values_list("error_class", flat=True)
        .distinct()
    )


def dead_letters_matching(*, data: dict | None) -> QuerySet[DeadLetter]:
    """The dead letters a staff member's filter matches (its cleaned data; none for None, a
    filter that is not valid), the newest first."""
    found = DeadLetter.objects.select_related("owner", "conversation", "message")
    if data is None:
        return found.none()
    if query := data["q"].strip():
        match = (
            Q(owner__username__icontains=query)
            | Q(conversation__title__icontains=query)
            | Q(message__text__icontains=query)
            | Q(reason__icontains=query)
            | Q(error_class__icontains=query)
        )
        if query.isdigit():
            match |= Q(conversation_id=int(query)) | Q(message_id=int(query))
        found = found.filter(match)
    if data["status"]:
        found = found.filter(status=data["status"])
    if data["error_class"]:
        found = found.filter(error_class=data["error_class"])
    if data["since"]:
        found = found.filter(created_at__date__gte=data["since"])
    if data["until"]:
        found = found.filter(created_at__date__lte=data["until"])
    return found.order_by("-created_at", "-id")


def dead_letter_actions(*, dead_letter: DeadLetter) -> QuerySet[StaffAction]:
    return StaffAction.objects.filter(dead_letter=dead_letter)


AROUND = 3  # exchanges shown before and after a dead message


def exchanges_around(*, message: Message) -> list[Message]:
    """The user messages just before and after this one, with their replies."""
    asked = Message.objects.filter(
        conversation_id=message.conversation_id, role=Message.Role.USER
    ).select_related("reply")
    before = list(asked.filter(pk__lt=message.pk).order_by("-pk")[:AROUND])[::-1]
    after = list(asked.filter(pk__gt=message.pk).order_by("pk")[:AROUND])
    return [*before, message, *after]


def attempts_of(*, dead_letter: DeadLetter) -> list[dict]:
    """Every attempt with the context it was given; from the stored runs while retention keeps
    them, else from the snapshot taken when the message was dead-lettered."""
    runs = list(dead_letter.message.runs.order_by("id"))
    if not runs:
        return [
            {
                **attempt,
                "snapshot": True,
                "started_at": parse_datetime(attempt.get("started_at") or ""),
                **attempt_times(
                    run=Run(
                        state=attempt.get("state", ""),
                        started_at=parse_datetime(attempt.get("started_at") or ""),
                        ended_at=parse_datetime(attempt.get("ended_at") or ""),
                        # Snapshots taken before it was kept have no heartbeat: the end stands.
                        heartbeat_at=parse_datetime(attempt.get("heartbeat_at") or ""),
                    )
                ),
            }
            for attempt in dead_letter.attempts
        ]
    contexts = {c.run_id: c for c in RunContext.objects.filter(run__in=runs)}
    return [
        {
            "attempt": run.attempt,
            "run": run,
            "state": run.get_state_display(),
            "worker": run.worker or run.node,
            "started_at": run.started_at,
            **attempt_times(run=run),
            "error": run.error,
            "traceback": run.traceback,
            "context": run_context_text(contexts[run.pk]) if run.pk in contexts else "",
        }
        for run in runs
    ]


def attempt_times(*, run) -> dict:
    """When an attempt really ended, and when that was noticed. A crashed process wrote
    nothing at its death: its last heartbeat is its last sign of life, and `ended_at` is when
    the watchdog noticed, up to a heartbeat TTL later. The duration runs to the real end."""
    if run.state == Run.State.CRASHED and run.heartbeat_at is not None:
        crash = CrashRecord.objects.filter(run_id=run.pk).first()
        return {
            "ended_at": run.heartbeat_at,
            "noticed_at": run.ended_at,
            "noticed_by": crash.noticed_by if crash else "",
            "duration": run.heartbeat_at - run.started_at if run.started_at else None,
        }
    return {
        "ended_at": run.ended_at,
        "noticed_at": None,
        "duration": run.ended_at - run.started_at if run.ended_at and run.started_at else None,
    }
