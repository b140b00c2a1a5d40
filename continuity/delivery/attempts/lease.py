"""Beginning an attempt: it takes the conversation's lease, a running Run row (a partial unique
index allows one per conversation), counted on the message before any of its work."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.db import InterfaceError, OperationalError, transaction

from ... import sql
from ...context.assembly import PENDING
from ...live.events import publish_message_changed
from ...models import Conversation, CrashRecord, Message, Run
from ..heartbeats import outage_note, stale_run_ids
from ..inbox import message_bump, message_bump_statement
from ..workers import current_incarnation
from .failures import runs_reap
from .locking import (
    conversation_lock_statement,
    conversation_locked,
    worker_identity,
)


def pending_messages(conversation_id: int):
    return Message.objects.filter(conversation_id=conversation_id).waiting().order_by("id")


def attempt_begin(
    *,
    conversation_id: int,
    node: str = "",
    reads: Callable[[Message], Sequence[sql.Statement]] | None = None,
    on_begin: Callable[[Run, Message, list[list[tuple]]], object] | None = None,
) -> Run | None:
    """Start an attempt on the conversation's oldest pending message, or None when there is
    nothing to do now (paused, backing off, empty, or another live attempt holds the lease).
    `on_begin` runs in the same transaction, with the lease held: what it stores commits with
    the attempt counter (one commit fewer per message). It is given the rows of the `reads`
    of the message, which run in the round trip that opens the attempt."""
    begun = None
    try:
        with transaction.atomic():
            conversation, message, leased = next_attempt_of(
                sql.batch(*next_attempt_statements(conversation_id)),
                conversation_id=conversation_id,
            )
            if message is not None:
                begun = attempt_start(
                    conversation=conversation,
                    message=message,
                    node=node,
                    reads=reads,
                    on_begin=on_begin,
                )
    except (OperationalError, InterfaceError):
        # The commit's answer never came: whether it took is unknown. Had it, the attempt began
        # and no one runs it: when the watchdog reaps it, it is an interruption, not a crash.
        if begun is not None:
            outage_note(begun.pk)
        raise
    if begun is not None:
        return begun
    if leased:
        # Another attempt holds the lease; if its heartbeat lapsed, its worker died. Asked once
        # the lock is released: Redis may take a while to answer, and the lock blocks writers.
        runs_reap(
            run_ids=stale_run_ids(Run.objects.filter(conversation_id=conversation_id)),
            detected_by=CrashRecord.Detector.DRAIN,
        )
    return None


def next_attempt_statements(conversation_id: int) -> list[sql.Statement]:
    """Lock the conversation, and read what `next_attempt_of` decides on."""
    return [conversation_lock_statement(conversation_id), lease_and_next_statement(conversation_id)]


def next_attempt_of(
    found: list[list[tuple]], *, conversation_id: int
) -> tuple[Conversation | None, Message | None, bool]:
    """From the rows of `next_attempt_statements` (or of another statement that locked the
    conversation and read it as `conversation_read` does, then `lease_and_next_statement`):
    the locked conversation, the message an attempt may begin on now (None when the
    conversation is paused, backing off, empty, or another live attempt holds its lease), and
    whether one does."""
    locked, next_up = found
    conversation = conversation_locked(locked)
    if conversation is None or conversation.state != Conversation.State.ACTIVE:
        return conversation, None, False
    leased, message = lease_and_next(next_up, conversation_id=conversation_id)
    if leased or conversation.backing_off:
        return conversation, None, leased
    return conversation, message, False


def attempt_start(
    *,
    conversation: Conversation,
    message: Message,
    node: str,
    reads: Callable[[Message], Sequence[sql.Statement]] | None = None,
    on_begin: Callable[[Run, Message, list[list[tuple]]], object] | None = None,
) -> Run:
    """Inside the caller's transaction, with the conversation locked and its lease free: begin
    the attempt on `message` (see `attempt_begin`)."""
    message.conversation = conversation  # the reads need its owner
    run, read = attempt_open(
        conversation=conversation,
        message=message,
        node=node,
        reads=reads(message) if reads is not None else (),
    )
    if on_begin is not None:
        try:
            on_begin(run, message, read)
        except (OperationalError, InterfaceError):
            # Its last write may commit the caller's transaction in the same round trip
            # (`sql.batch`): see `attempt_begin`.
            outage_note(run.pk)
            raise
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    )
    return run


@transaction.atomic
def attempt_withdraw(run: Run) -> bool:
    """Once its beginning committed, before any of its work: take the attempt back as if it had
    never begun (its run is deleted, its message queued with its count as it was). Its caller
    says when the conversation goes on. False, with nothing changed, when the run was already
    ended elsewhere (a watchdog, a handover): that party decided what follows."""
    running = Run.objects.select_for_update().filter(pk=run.pk, state=Run.State.RUNNING)
    if not running.exists():
        return False
    running.delete()  # with what its beginning stored: its context, its recovery
    message_bump(message_id=run.message_id, attempts=run.attempt - 1, state=Message.State.QUEUED)
    transaction.on_commit(
        lambda: publish_message_changed(
            conversation_id=run.conversation_id, message_id=run.message_id
        )
    )
    return True


def lease_and_next_statement(conversation_id: int) -> sql.Statement:
    """Whether a live attempt holds the conversation's lease, and its oldest pending message.
    A statement of its own, run after the lock's: a subquery of the locking statement would
    read a snapshot taken before the wait for the lock, missing a lease taken meanwhile. The
    running state is written out, not bound: only then may a plan kept for every conversation
    read the index of running runs (`run_one_running_per_conversation`), not every past run."""
    return (
        "SELECT EXISTS (SELECT 1 FROM continuity_run WHERE conversation_id = %s "
        f"AND state = '{Run.State.RUNNING}'), m.id, m.text, m.attempts, m.interruptions, "
        "m.version_of_id "
        "FROM (SELECT 1) AS one LEFT JOIN continuity_message AS m ON m.id = ("
        f"SELECT id FROM continuity_message WHERE {PENDING} ORDER BY id LIMIT 1)",
        [conversation_id, conversation_id],
    )


def lease_and_next(found: list[tuple], *, conversation_id: int) -> tuple[bool, Message | None]:
    ((leased, pk, text, attempts, interruptions, version_of_id),) = found
    if pk is None:
        return bool(leased), None
    message = sql.instance(
        Message,
        id=pk,
        conversation_id=conversation_id,
        role=Message.Role.USER,
        text=text,
        attempts=attempts,
        interruptions=interruptions,
        version_of_id=version_of_id,
    )
    return bool(leased), message


def attempt_open(
    *,
    conversation: Conversation,
    message: Message,
    node: str,
    reads: Sequence[sql.Statement] = (),
) -> tuple[Run, list[list[tuple]]]:
    """With the conversation locked: count the attempt on the message and take the lease, and
    run `reads` in the same round trip. The run, and the rows of `reads`."""
    attempt = message.attempts + 1
    run_insert, written = sql.insert_statement(
        Run,
        conversation_id=conversation.pk,
        message_id=message.pk,
        attempt=attempt,
        node=node,
        incarnation=current_incarnation(),
        worker=worker_identity(),
    )
    # Committed before any work, so an attempt that dies still counts (poison detection).
    counted = message_bump_statement(
        message_id=message.pk, attempts=attempt, state=Message.State.PROCESSING
    )
    _, opened, *read = sql.batch(counted, run_insert, *reads)
    message.attempts, message.state = attempt, Message.State.PROCESSING
    run = sql.inserted(Run, opened, written)
    run.conversation, run.message = conversation, message
    return run, read
