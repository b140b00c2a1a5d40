"""Attempt lifecycle: begin (take the conversation's lease), finish, or end unsuccessfully.

The running Run row is the conversation's lease (a partial unique index allows one per
conversation) and its id is the fencing token: every write of an attempt first locks its row and
checks that it is still running, so an attempt that was reaped or interrupted cannot write.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import ExpressionWrapper, Model
from django.db.models.functions import Now

from .. import sql
from ..context.assembly import PENDING
from ..context.handoffs import (
    handoff_after_interruption,
    handoff_after_turn,
    handoff_latest_statement,
    handoff_of,
)
from ..context.memory import memory_remember_all
from ..database.clock import db_now, db_now_plus
from ..errors import (
    DATABASE_LOST,
    MODEL_BUSY,
    AttemptStopped,
    InvalidTransition,
    NextAttemptFailed,
)
from ..live.events import publish_conversation_changed, publish_message_changed
from ..models import Checkpoint, Conversation, CrashRecord, Handoff, Message, Run, StaffAction
from ..ops.faults import fault_point
from .audit import staff_action_record
from .conversations import conversation_pause
from .dead_letters import dead_letter_create
from .heartbeats import outage_note, outages_noted, stale_before, stale_run_ids
from .inbox import conversation_enqueue, message_bump, message_bump_statement
from .workers import current_incarnation

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=Model)
B = TypeVar("B")
CRASH_ERROR = "Heartbeat stopped: the worker process died or hung."


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def backoff_delay(failures: int) -> timedelta:
    steps = settings.CONTINUITY_CRASH_BACKOFF_SECONDS
    return timedelta(seconds=steps[max(1, min(failures, len(steps))) - 1])


def crash_window_start() -> ExpressionWrapper:
    return db_now_plus(-timedelta(seconds=settings.CONTINUITY_CRASH_WINDOW_SECONDS))


def conversation_lock(conversation_id: int) -> Conversation | None:
    """Every transaction that changes an attempt locks its conversation first, then the run,
    then messages: one order everywhere, so no two of them can deadlock."""
    return conversation_locked(sql.rows(*conversation_lock_statement(conversation_id)))


def conversation_lock_statement(conversation_id: int) -> sql.Statement:
    return (
        f"SELECT {conversation_read()} FROM continuity_conversation WHERE id = %s"
        f"{sql.for_update()}",
        [conversation_id],
    )


def conversation_read() -> str:
    """What an attempt reads of its locked conversation: see `conversation_locked`."""
    return f"id, owner_id, state, brain, retry_at IS NOT NULL AND retry_at > {db_now()}"


def conversation_locked(found: list[tuple]) -> Conversation | None:
    """The locked row (read by `conversation_read`), with what an attempt reads (the other
    fields load on access) and `backing_off`, judged on the database's clock."""
    if not found:
        return None
    ((pk, owner_id, state, brain, backing_off),) = found
    conversation = sql.instance(Conversation, id=pk, owner_id=owner_id, state=state, brain=brain)
    conversation.backing_off = bool(backing_off)
    return conversation


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


def conversation_wait_for_model(*, conversation_id: int, seconds: float) -> None:
    """Its brain's model server is unavailable: nothing begins before its next try, which the
    watchdog's sweep sends; the page says why it waits."""
    Conversation.objects.filter(pk=conversation_id, state=Conversation.State.ACTIVE).update(
        retry_at=db_now_plus(timedelta(seconds=seconds)),
        waiting_for=Conversation.WaitingFor.MODEL,
    )
    transaction.on_commit(lambda: publish_conversation_changed(conversation_id=conversation_id))


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


def run_owns(run: Run, *, lock: str = "") -> sql.Statement:
    """The condition that the attempt's run still owns its message (the fence)."""
    return (
        f"EXISTS (SELECT 1 FROM continuity_run WHERE id = %s AND state = %s{lock})",
        [run.pk, Run.State.RUNNING],
    )


def fenced_insert(model: type[M], *, run: Run, **values: object) -> sql.Statement:
    """The INSERT of a row of the attempt, stored only while its run still owns the message, in
    one statement, so no reaping falls between the check and the insert; on PostgreSQL the
    run's row is share-locked, so a reaper ending the run at this moment is waited for. It
    returns nothing when fenced off: see `fence_held`."""
    statement, _ = sql.insert_statement(
        model,
        where=run_owns(run, lock=sql.for_share()),
        message_id=run.message_id,
        run_id=run.pk,
        **values,
    )
    return statement


def fence_held(run: Run, *found: list[tuple]) -> None:
    """Each of these writes of the attempt stored its row, or the attempt was fenced off."""
    if not all(found):
        raise AttemptStopped(f"Run {run.pk} no longer owns message {run.message_id}.")


def checkpoint_insert(*, run: Run, name: str, output: dict) -> sql.Statement:
    return fenced_insert(Checkpoint, run=run, step=name, output=output)


def reply_store(
    *,
    run: Run,
    text: str,
    run_state: str,
    error: str = "",
    stopped: bool = False,
    cut_off: bool = False,
    first: Sequence[sql.Statement] = (),
    then: Sequence[sql.Statement] = (),
    follow_up: bool = True,
) -> tuple[Message, bool, list[list[tuple]]]:
    """Inside the caller's transaction, in one round trip: lock the conversation (clearing
    its backoff), run `first` (fenced writes of the attempt), end the run in `run_state`,
    store `text` as the reply, mark the message done and let the conversation's next queued
    message go on: a drain is sent for it once the transaction commits, unless the caller
    answers it itself (`follow_up` False). `then`: reads run last, under the lock. The reply,
    whether more messages wait, and the rows of `then`, after the conversation's row as its
    lock read it (`conversation_read`).

    Ending the run is the fence: an attempt that no longer owns the message stores nothing
    (the reply is stored only once the run has ended in `run_state`, and the caller's
    transaction rolls back the rest)."""
    now = db_now()
    reply_insert, written = sql.insert_statement(
        Message,
        where=(
            "EXISTS (SELECT 1 FROM continuity_run WHERE id = %s AND state = %s) AND NOT EXISTS "
            "(SELECT 1 FROM continuity_message WHERE reply_to_id = %s)",
            [run.pk, run_state, run.message_id],
        ),
        conversation_id=run.conversation_id,
        role=Message.Role.ASSISTANT,
        text=text,
        state=Message.State.DONE,
        reply_to_id=run.message_id,
        stopped=stopped,
        cut_off=cut_off,
    )
    found = sql.batch(
        (
            f"UPDATE continuity_conversation SET retry_at = NULL, updated_at = {now} "
            f"WHERE id = %s RETURNING {conversation_read()}",
            [run.conversation_id],
        ),
        *first,
        (
            f"UPDATE continuity_run SET state = %s, ended_at = {now}, error = %s "
            "WHERE id = %s AND state = %s RETURNING id",
            [run_state, error, run.pk, Run.State.RUNNING],
        ),
        reply_insert,
        (
            "UPDATE continuity_message SET version = version + 1, state = %s WHERE id = %s "
            f"RETURNING EXISTS (SELECT 1 FROM continuity_message WHERE {PENDING} AND id <> %s)",
            [Message.State.DONE, run.message_id, run.conversation_id, run.message_id],
        ),
        *then,
    )
    locked, *firsts, ended, stored, ((more_pending,),) = found[: len(found) - len(then)]
    thens = [locked, *found[len(found) - len(then) :]]
    fence_held(run, *firsts, ended)
    if more_pending and follow_up:
        conversation_enqueue(conversation_id=run.conversation_id)
    transaction.on_commit(
        lambda: publish_message_changed(
            conversation_id=run.conversation_id, message_id=run.message_id
        )
    )
    return sql.inserted(Message, stored, written), bool(more_pending), thens


def run_lock_owned(run: Run) -> None:
    """Inside a transaction: hold the run's row and make sure this attempt still owns it."""
    owned = sql.row(
        f"SELECT 1 FROM continuity_run WHERE id = %s AND state = %s{sql.for_update()}",
        [run.pk, Run.State.RUNNING],
    )
    if owned is None:
        raise AttemptStopped(f"Run {run.pk} no longer owns message {run.message_id}.")


@dataclass(frozen=True)
class Finished(Generic[B]):
    """How `attempt_finish` left the conversation's queue."""

    # More wait, no drain was sent for them and none began: the caller answers the next.
    more_pending: bool = False
    # The attempt on the next message, begun in the transaction that stored the reply.
    next_begun: B | None = None


def attempt_finish(
    *,
    run: Run,
    reply_text: str,
    cut_off: bool = False,
    handoff_changes: dict | None = None,
    remembered: dict[str, str] | None = None,
    follow_up: bool = True,
    begin_next: Callable[[Conversation, Message], B | None] | None = None,
) -> Finished[B]:
    """Store the reply, mark the message done and the run completed, in one transaction, with
    the end-of-turn handoff: written once, even when an earlier attempt got this far.
    `remembered`: the facts of the last step, stored with its checkpoint in that transaction
    (no step follows it); None when an earlier attempt stored them.

    With `follow_up` False, more waiting messages are left to the caller; with `begin_next`
    too, the attempt on the next one begins in the same transaction (`begin_next` calls
    `attempt_start`, or takes the attempt back and returns None): one commit, and its flush
    to disk, fewer per message. Its counter still commits before any of its work. When it
    fails, NextAttemptFailed: nothing was stored, and the caller stores the reply alone."""
    first = []
    if remembered is not None:
        first.append(checkpoint_insert(run=run, name="remember", output={"facts": remembered}))
    then = [handoff_latest_statement(conversation_id=run.conversation_id)]
    if begin_next is not None and not follow_up:
        # The conversation is locked, and read, by the reply's first statement.
        then.append(lease_and_next_statement(run.conversation_id))
    begun = None
    try:
        with transaction.atomic():
            finished, begun = reply_and_next(
                run=run,
                reply_text=reply_text,
                cut_off=cut_off,
                handoff_changes=handoff_changes,
                remembered=remembered,
                follow_up=follow_up,
                begin_next=begin_next,
                first=first,
                then=then,
            )
    except (OperationalError, InterfaceError):
        # The commit's answer never came: whether it took is unknown. Had it, the next attempt
        # began, and no one will run it: when the watchdog reaps it, it is an interruption.
        if begun is not None:
            outage_note(begun.run.pk)
        raise
    fault_point("after_reply_committed")
    return finished


def reply_and_next(
    *,
    run: Run,
    reply_text: str,
    cut_off: bool,
    handoff_changes: dict | None,
    remembered: dict[str, str] | None,
    follow_up: bool,
    begin_next: Callable[[Conversation, Message], B | None] | None,
    first: list[sql.Statement],
    then: list[sql.Statement],
) -> tuple[Finished[B], B | None]:
    """`attempt_finish`'s transaction: the reply, and the attempt on the next message."""
    _, more_pending, (locked, latest_handoff, *next_up) = reply_store(
        run=run,
        text=reply_text,
        cut_off=cut_off,
        run_state=Run.State.COMPLETED,
        first=first,
        then=then,
        follow_up=follow_up,
    )
    if remembered:
        memory_remember_all(
            owner_id=run.conversation.owner_id, message_id=run.message_id, facts=remembered
        )
    handoff_after_turn(run=run, changes=handoff_changes, latest=handoff_of(latest_handoff))
    if not (next_up and more_pending):
        return Finished(more_pending=more_pending and not follow_up), None
    conversation, message, _ = next_attempt_of(
        [locked, *next_up], conversation_id=run.conversation_id
    )
    try:
        begun = begin_next(conversation, message) if message is not None else None
    except Exception as exc:  # the next message's trouble must not cost this reply
        raise NextAttemptFailed(f"Run {run.pk}: the next attempt did not begin.") from exc
    return Finished(next_begun=begun), begun


def each_guarded(items: list[int], action, what: str) -> int:
    """Apply `action` to each id; one failing item is logged and must not stop the others."""
    done = 0
    for item in items:
        try:
            done += bool(action(item))
        except Exception:
            logger.exception("Could not %s %s", what, item)
    return done


def runs_reap(
    *, run_ids: list[int], detected_by: str, only_if_stale: bool = True, error: str = CRASH_ERROR
) -> int:
    """End these runs as crashed; those that lost the database (`outage_note`) as interrupted,
    which the message is not charged for, whatever the outage's length."""
    lost_database = outages_noted(run_ids)

    def reap(run_id: int) -> bool:
        if run_id in lost_database:
            return attempt_end(
                run_id=run_id,
                state=Run.State.INTERRUPTED,
                error=f"{DATABASE_LOST}: the attempt could not record its end.",
                only_if_stale=only_if_stale,
            )
        return attempt_end(
            run_id=run_id,
            state=Run.State.CRASHED,
            error=error,
            detected_by=detected_by,
            only_if_stale=only_if_stale,
        )

    return each_guarded(run_ids, reap, "reap run")


@transaction.atomic
def attempt_end(
    *,
    run_id: int,
    state: str,
    error: str,
    traceback: str = "",
    permanent: bool = False,
    detected_by: str = "",
    only_if_stale: bool = False,
    handoff_reason: str = "",
    wait: float | None = None,
    counted: bool = True,
) -> bool:
    """End a running attempt that did not produce a reply; False if it had already ended (or,
    with `only_if_stale`, if it has heartbeaten since it was judged dead). An interruption
    given back by a model server that failed: `wait`, the seconds until its next try;
    `counted`, whether it counts towards the message's cap of interruptions.

    Then exactly one of: give the attempt back (an interruption: planned shutdown or database
    outage), dead-letter the message (permanent error, attempts or interruptions used up), pause
    the conversation (crash loop), or back off.
    """
    conversation_id = Run.objects.filter(pk=run_id).values_list("conversation_id", flat=True)
    if not conversation_id or conversation_lock(conversation_id[0]) is None:
        return False
    running = Run.objects.filter(pk=run_id, state=Run.State.RUNNING)
    if only_if_stale:
        running = running.filter(heartbeat_at__lt=stale_before())
    if not running.update(state=state, ended_at=Now(), error=error, traceback=traceback):
        return False
    run = Run.objects.select_related("message", "conversation").get(pk=run_id)
    message, conversation = run.message, run.conversation
    logger.warning("Run %s of message %s ended %s: %s", run.pk, message.pk, state, error)
    if state == Run.State.CRASHED:
        CrashRecord.objects.create(
            conversation=conversation, message=message, run=run, detected_by=detected_by
        )
        handoff_reason = handoff_reason or Handoff.Reason.CRASH_RECOVERY
    if handoff_reason:
        handoff_after_interruption(run=run, reason=handoff_reason)
    if state == Run.State.INTERRUPTED:
        given_back = message_give_back(
            message=message, conversation=conversation, error=error, wait=wait, counted=counted
        )
        if given_back:
            return True
    elif permanent or message.attempts >= settings.CONTINUITY_MAX_ATTEMPTS:
        reason = error if permanent else f"Gave up after {message.attempts} attempts. {error}"
        dead_letter_create(message=message, reason=reason)
        return True
    else:
        message_bump(message_id=message.pk, state=Message.State.QUEUED)
        if conversation.state == Conversation.State.ACTIVE:
            conversation_back_off_or_pause(
                conversation=conversation,
                message=message,
                crashed=state == Run.State.CRASHED,
                error=error,
            )
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    )
    return True


def message_give_back(
    *,
    message: Message,
    conversation: Conversation,
    error: str,
    wait: float | None = None,
    counted: bool = True,
) -> bool:
    """An interruption is not the message's fault: it does not use up an attempt. It has its own
    cap, so a message that provokes restarts cannot loop forever; True if it dead-lettered it.
    A model server's outage (`counted` False) is nobody's doing here, and is not counted."""
    interruptions = message.interruptions + counted
    if interruptions > settings.CONTINUITY_MAX_INTERRUPTIONS:
        dead_letter_create(
            message=message, reason=f"Interrupted {message.interruptions} times. Last: {error}"
        )
        return True
    message_bump(
        message_id=message.pk,
        state=Message.State.QUEUED,
        attempts=message.attempts - 1,
        interruptions=interruptions,
    )
    if wait is not None:
        # The watchdog's sweep sends the drain once the server's next try has come.
        waited_for = Conversation.WaitingFor.MODEL
        if error.startswith(MODEL_BUSY):  # answering others: its next answer frees a slot
            waited_for = Conversation.WaitingFor.MODEL_BUSY
        Conversation.objects.filter(pk=conversation.pk).update(
            retry_at=db_now_plus(timedelta(seconds=wait)), waiting_for=waited_for
        )
        return False
    if error.startswith(DATABASE_LOST):
        # Give the database time to settle; a planned shutdown resumes at once.
        Conversation.objects.filter(pk=conversation.pk).update(
            retry_at=db_now_plus(backoff_delay(interruptions)),
            waiting_for=Conversation.WaitingFor.DATABASE,
        )
    conversation_enqueue(conversation_id=conversation.pk)
    return False


def conversation_back_off_or_pause(
    *, conversation: Conversation, message: Message, crashed: bool, error: str
) -> None:
    """Wait longer after each recent failure of this message; pause the conversation after too
    many recent unresolved crashes in a row: with no message answered at its first try since
    the first of them. A conversation that goes on answering is not in a crash loop, however
    often its workers are killed (a host that keeps losing processes, a run of deploys); one
    whose every message kills its first attempt is."""
    since = crash_window_start()
    unresolved = CrashRecord.objects.filter(
        conversation=conversation, resolved_at=None, detected_at__gte=since
    )
    if crashed and (answered := last_clean_answer(conversation.pk)) is not None:
        unresolved = unresolved.filter(detected_at__gt=answered)
    crashes = unresolved.count()
    if crashed and crashes >= settings.CONTINUITY_PAUSE_AFTER_CRASHES:
        conversation_pause(
            conversation=conversation,
            reason=f"{crashes} crashes within {settings.CONTINUITY_CRASH_WINDOW_SECONDS:g} s, "
            f"with no message answered at its first try between them; last: {error}",
        )
        return
    # Counted per message: a dead-lettered poison message must not make its successor wait long.
    failures = message.runs.filter(
        state__in=[Run.State.CRASHED, Run.State.FAILED], ended_at__gte=since
    ).count()
    Conversation.objects.filter(pk=conversation.pk).update(
        retry_at=db_now_plus(backoff_delay(failures)), waiting_for=""
    )


def last_clean_answer(conversation_id: int):
    """When the conversation's newest answer given at the first try was stored; None if none.
    Read only after a crash: the newest of the conversation's runs come first."""
    return (
        Run.objects.filter(conversation_id=conversation_id, state=Run.State.COMPLETED, attempt=1)
        .order_by("-id")
        .values_list("ended_at", flat=True)
        .first()
    )


def reply_stop(
    *, message: Message, run_id: int | None = None, by=None, reason: str = ""
) -> Message:
    """The person stopped the reply being written to `message` (or, with `by`, staff did from
    the console, audited): keep what was written as the reply, marked stopped; nothing is
    retried, and the next queued message goes on.

    The attempt learns it at its next write or heartbeat (its run is no longer running) and
    ends without writing anything more: every write of an attempt is fenced on its run's
    state. A stopped turn stores no new memory or handoff; the exchange stays in the history."""
    with transaction.atomic():
        conversation_lock(message.conversation_id)
        run = Run.objects.select_for_update().filter(message=message, state=Run.State.RUNNING)
        if run_id is not None:  # the attempt staff confirmed, not a later one of the message
            run = run.filter(pk=run_id)
        run = run.first()
        if run is None:
            raise InvalidTransition(f"No reply is being written to message {message.pk}.")
        written = run.reply_chunks.order_by("seq").values_list("text", flat=True)
        reply, _, _ = reply_store(
            run=run,
            text="".join(written),
            run_state=Run.State.STOPPED,
            error="Stopped by staff." if by is not None else "Stopped by the user.",
            stopped=True,
        )
        if by is not None:
            Message.objects.filter(pk=reply.pk).update(stopped_by_staff=True)
            reply.stopped_by_staff = True
            staff_action_record(
                kind=StaffAction.Kind.STOP,
                by=by,
                reason=reason,
                conversation_id=message.conversation_id,
                details={"run": run.pk, "message": message.pk},
            )
    logger.info(
        "Run %s of message %s stopped by %s",
        run.pk,
        message.pk,
        f"staff ({by.get_username()})" if by is not None else "its owner",
    )
    return reply
