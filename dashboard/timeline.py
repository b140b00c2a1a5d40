"""A message's whole story in one place, in time order: accepted, each attempt with its worker
and how it really ended, checkpoints and chunks, recoveries, the dead letter, staff actions,
versions and re-asks, the reply. The "where did it fail last time?" page (Temporal's event
history, Sidekiq's job detail)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max, Min, Q

from continuity.context import recovery_words
from continuity.models import (
    Checkpoint,
    Message,
    Recovery,
    ReplyChunk,
    Run,
    StaffAction,
    ToolCall,
)
from continuity.words import clip, plural


@dataclass(frozen=True)
class Event:
    at: datetime
    what: str
    detail: str = ""
    kind: str = ""  # for the page's styling and tests: accepted, attempt, crash, reply, …


def message_timeline(message: Message) -> list[Event]:
    events = [Event(message.created_at, "Accepted", f"“{clip(message.text)}”", "accepted")]
    if message.version_of_id:
        events.append(
            Event(message.created_at, f"A new version of message {message.version_of_id}")
        )
    if message.reasked_from_id:
        events.append(
            Event(
                message.created_at,
                f"Asked again from message {message.reasked_from_id}, which could not be processed",
                kind="reask",
            )
        )
    events += attempt_events(message)
    events += step_events(message)
    events += tool_events(message)
    for recovery in Recovery.objects.filter(message=message).order_by("id"):
        words = recovery_words(recovery)
        restored = f", from {words.restored}" if words.restored else ""
        events.append(
            Event(
                recovery.resumed_at,
                f"Resumed after {recovery.get_kind_display()}",
                f"{words.after} after the interruption{restored}",
                "recovery",
            )
        )
    events += dead_letter_events(message)
    for later in Message.objects.filter(version_of_id=message.version_of_id or message.pk).filter(
        pk__gt=message.pk
    ):
        events.append(Event(later.created_at, f"Replaced by a new version: message {later.pk}"))
    for reask in Message.objects.filter(reasked_from=message):
        events.append(Event(reask.created_at, f"Asked again as message {reask.pk}", kind="reask"))
    reply = Message.objects.filter(reply_to=message).first()
    if reply is not None:
        ending = " (stopped)" if reply.stopped else " (cut off)" if reply.cut_off else ""
        events.append(
            Event(reply.created_at, f"Answered{ending}", f"“{clip(reply.text)}”", "reply")
        )
    return sorted(events, key=lambda event: event.at)


def attempt_events(message: Message) -> list[Event]:
    events = []
    runs = Run.objects.filter(message=message).select_related("crash").order_by("id")
    for run in runs:
        worker = run.worker or run.node or "a worker"
        events.append(
            Event(run.started_at, f"Attempt {run.attempt} started", f"on {worker}", "attempt")
        )
        crash = getattr(run, "crash", None)
        if run.state == Run.State.RUNNING:
            events.append(Event(run.heartbeat_at, f"Attempt {run.attempt}: last heartbeat"))
        elif run.state == Run.State.CRASHED:
            events.append(
                Event(
                    run.heartbeat_at,
                    f"Attempt {run.attempt}: last sign of life",
                    "its last heartbeat; the process died soon after",
                    "crash",
                )
            )
            noticed = crash.detected_at if crash else run.ended_at
            by = f" by {crash.noticed_by}" if crash else ""
            events.append(
                Event(noticed, f"Attempt {run.attempt}: crash noticed{by}", run.error, "crash")
            )
        elif run.ended_at is not None:
            events.append(
                Event(
                    run.ended_at,
                    f"Attempt {run.attempt} {run.get_state_display().lower()}",
                    run.error,
                    "attempt",
                )
            )
    return events


def step_events(message: Message) -> list[Event]:
    """Checkpoints and streamed chunks, counted per attempt, at their first time."""
    return [
        *counted_per_attempt(Checkpoint, message, "checkpoint", "stored"),
        *counted_per_attempt(ReplyChunk, message, "reply chunk", "streamed"),
    ]


def tool_events(message: Message) -> list[Event]:
    """Each model round that asked for tools, and each call: when it was recorded, run, and
    how it ended."""
    events = []
    for checkpoint in Checkpoint.objects.filter(message=message, step__startswith="round-"):
        calls = checkpoint.output.get("calls", [])
        names = ", ".join(call.get("name", "?") for call in calls)
        number = checkpoint.step.removeprefix("round-")
        events.append(
            Event(
                checkpoint.created_at, f"Round {number}: the model asked for {names}", kind="round"
            )
        )
    for call in ToolCall.objects.filter(message=message).order_by("round", "position"):
        where = f"{call.tool} ({call.source or 'unknown'})"
        if call.started_at is not None:
            runs = f", run {call.runs} times" if call.runs > 1 else ""
            events.append(Event(call.started_at, f"Tool call {where} started{runs}", kind="tool"))
        if call.ended_at is not None:
            seconds = f" after {call.seconds:.2f} s" if call.seconds is not None else ""
            decided = f"; its owner chose {call.get_decision_display()}" if call.decision else ""
            events.append(
                Event(
                    call.ended_at,
                    f"Tool call {where}: {call.get_state_display().lower()}{seconds}{decided}",
                    clip(call.problem or call.result),
                    "tool",
                )
            )
    return events


def counted_per_attempt(model, message: Message, noun: str, verb: str) -> list[Event]:
    rows = (
        model.objects.filter(message=message)
        .values("run__attempt")
        .annotate(n=Count("id"), first=Min("created_at"), last=Max("created_at"))
    )
    return [
        Event(
            row["first"],
            f"{plural(row['n'], noun)} {verb}",
            f"by attempt {row['run__attempt']}, the last at {row['last']:%H:%M:%S}",
        )
        for row in rows
    ]


def dead_letter_events(message: Message) -> list[Event]:
    events = []
    # A reverse one-to-one that does not exist raises an AttributeError: hasattr is the test.
    if hasattr(message, "dead_letter"):
        dead_letter = message.dead_letter
        events.append(
            Event(dead_letter.created_at, "Dead-lettered", dead_letter.reason, "dead_letter")
        )
    actions = StaffAction.objects.filter(
        Q(dead_letter__message=message) | Q(details__message=message.pk)
    ).order_by("created_at")
    for action in actions:
        events.append(
            Event(
                action.created_at,
                f"{action.get_kind_display()} by {action.actor_name}",
                action.reason,
                "staff",
            )
        )
    return events
