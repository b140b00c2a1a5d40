"""Restart banners: a record whenever an attempt resumes work that an earlier one left
unfinished, and the plain words that tell the user what happened and what was restored.

What was restored is read from the resuming run's stored context (`RunContext`), so the banner,
the "Show what was recovered" page and the brain all speak of the same items.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from ..brains import RecoveryNote
from ..errors import (
    AWAITING_APPROVAL,
    CALLS_IN_DOUBT,
    CONTEXT_TOO_LONG,
    DATABASE_LOST,
    MODEL_BUSY,
    MODEL_UNAVAILABLE,
    TAKEN_OVER,
    TOOL_SERVER_DOWN,
)
from ..live.events import publish_message_changed
from ..models import Alert, Handoff, Message, Recovery, Run, RunContext
from ..words import plural

# What happened, as accurately as the engine knows it.
WHAT_HAPPENED = {
    Recovery.Kind.CRASH: "a worker process stopped",
    Recovery.Kind.PLANNED_SHUTDOWN: "a planned restart",
    Recovery.Kind.DATABASE_OUTAGE: "the database was unavailable",
    Recovery.Kind.MODEL_UNAVAILABLE: "the model server was unavailable",
    Recovery.Kind.FAILED: "an error stopped the answer",
    Recovery.Kind.PAUSE: "repeated crashes paused this conversation until staff resumed it",
    Recovery.Kind.TAKEOVER: "support took the conversation over",
    Recovery.Kind.TOOL_SERVER_DOWN: "a tool server could not be reached",
}


def given_back_unstarted(run: Run) -> bool:
    """Whether an attempt was given back before the model wrote anything: it waited for a free
    slot of a busy model server, or its prompt was refused as too long and the next attempt
    compacts it. The person saw no interruption, so none is reported."""
    return run.state == Run.State.INTERRUPTED and run.error.startswith(
        (MODEL_BUSY, CONTEXT_TOO_LONG, CALLS_IN_DOUBT, AWAITING_APPROVAL)
    )


def run_stop_kind(stopped: Run) -> str:
    """Why an attempt stopped, as a Recovery.Kind, from what its run recorded."""
    if stopped.state == Run.State.INTERRUPTED:
        if stopped.error.startswith(DATABASE_LOST):
            return Recovery.Kind.DATABASE_OUTAGE
        if stopped.error.startswith(MODEL_UNAVAILABLE):
            return Recovery.Kind.MODEL_UNAVAILABLE
        if stopped.error.startswith(TOOL_SERVER_DOWN):
            return Recovery.Kind.TOOL_SERVER_DOWN
        if stopped.error.startswith(TAKEN_OVER):
            return Recovery.Kind.TAKEOVER
        return Recovery.Kind.PLANNED_SHUTDOWN
    if stopped.state == Run.State.FAILED:
        return Recovery.Kind.FAILED
    return Recovery.Kind.CRASH


def recovery_kind(interrupted: Run) -> str:
    kind = run_stop_kind(interrupted)
    if kind != Recovery.Kind.CRASH:
        return kind
    resumed_by_staff = Alert.objects.filter(
        conversation_id=interrupted.conversation_id,
        acknowledged_at__gte=interrupted.ended_at or interrupted.heartbeat_at,
    ).exists()
    return Recovery.Kind.PAUSE if resumed_by_staff else Recovery.Kind.CRASH


def recovery_record(*, run: Run) -> Recovery | None:
    """Inside the caller's fenced transaction: record a recovery when the attempt before this
    one on the same message crashed or was interrupted. Its banner appears live."""
    earlier = Run.objects.filter(message_id=run.message_id, pk__lt=run.pk)
    interrupted = earlier.order_by("-pk").first()
    if interrupted is None or interrupted.state not in (Run.State.CRASHED, Run.State.INTERRUPTED):
        return None
    if given_back_unstarted(interrupted):
        return None  # nothing was interrupted: it waited its turn, or is asked again shorter
    recovery = Recovery.objects.create(
        conversation_id=run.conversation_id,
        message_id=run.message_id,
        run=run,
        interrupted_run=interrupted,
        kind=recovery_kind(interrupted),
        interrupted_at=interrupted.heartbeat_at,
    )
    recovery.refresh_from_db(fields=["resumed_at"])
    transaction.on_commit(
        lambda: publish_message_changed(
            conversation_id=run.conversation_id, message_id=run.message_id
        )
    )
    return recovery


def recovery_note(recovery: Recovery) -> RecoveryNote:
    return RecoveryNote(
        kind=recovery.kind,
        label=WHAT_HAPPENED.get(recovery.kind, recovery.get_kind_display()),
        interrupted_at=recovery.interrupted_at,
        down_seconds=recovery.down_seconds,
    )


@dataclass(frozen=True)
class Restored:
    """What the resuming attempt was given, counted from its stored context."""

    handoff: Handoff | None
    facts: int
    summary_messages: int
    turns: int
    waiting: int


def restored_of(run_context: RunContext | None) -> Restored:
    if run_context is None:
        return Restored(handoff=None, facts=0, summary_messages=0, turns=0, waiting=0)
    summary_messages = 0
    if (summary := run_context.summary) is not None:
        # As the person counts them: each exchange the summary covers (the shown branch's
        # answered questions up to the one it was written through) is a question and its reply,
        # whatever their ids (a burst's replies come after its later questions).
        covered = Message.objects.shown().filter(
            conversation_id=summary.conversation_id,
            role=Message.Role.USER,
            state=Message.State.DONE,
            pk__lte=summary.covers_through_id,
        )
        replies = Message.objects.shown().filter(reply_to__in=covered)
        summary_messages = covered.count() + replies.count()
    return Restored(
        handoff=run_context.handoff,
        facts=len(run_context.facts),
        summary_messages=summary_messages,
        turns=len(run_context.turns),
        waiting=len(run_context.waiting),
    )


def restored_items(restored: Restored) -> list[str]:
    """What the resuming attempt was given, in words a person uses (no handoffs, facts or
    checkpoints): the assistant's notes on this conversation, what it remembers about them, a
    summary, the last messages."""
    items = []
    if restored.handoff is not None:
        items.append("my notes on this conversation")
    if restored.facts:
        things = "thing" if restored.facts == 1 else "things"
        items.append(f"{restored.facts} {things} I remember about you")
    if restored.summary_messages:
        items.append(f"a summary of {plural(restored.summary_messages, 'earlier message')}")
    if restored.turns:
        items.append(f"our last {plural(restored.turns, 'message')}")
    if restored.waiting:
        items.append(f"{plural(restored.waiting, 'message')} that waited")
    return items


@dataclass(frozen=True)
class RecoveryWords:
    """A restart banner's parts: "I was interrupted at <when> (<what>) and picked up <after>
    later from <restored>." The time is shown in the reader's own time zone by the page."""

    interrupted_at: object  # a datetime
    what: str
    after: str
    restored: str


def recovery_words(recovery: Recovery) -> RecoveryWords:
    run_context = RunContext.objects.filter(run_id=recovery.run_id).first()
    items = restored_items(restored_of(run_context))
    listed = (
        ""
        if not items
        else items[0]
        if len(items) == 1
        else ", ".join(items[:-1]) + " and " + items[-1]
    )
    return RecoveryWords(
        interrupted_at=recovery.interrupted_at,
        what=WHAT_HAPPENED.get(recovery.kind, recovery.get_kind_display()),
        after=duration(recovery.down_seconds),
        restored=listed,
    )


def recovery_sentence(recovery: Recovery) -> str:
    """The banner as plain text, with the time in the server's zone (the page shows the
    reader's): "I was interrupted at 21:14 UTC (a worker process stopped) and picked up 12 s
    later from my notes on this conversation, 3 things I remember about you and our last 20
    messages." """
    words = recovery_words(recovery)
    restored = f" from {words.restored}" if words.restored else ""
    return (
        f"I was interrupted at {clock(words.interrupted_at)} ({words.what}) and picked up "
        f"{words.after} later{restored}."
    )


def clock(moment) -> str:
    return f"{timezone.localtime(moment):%H:%M %Z}"


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{round(seconds)} s"
    return f"{round(seconds / 60)} min"
