"""Finishing an attempt: its reply stored, fenced, in the transaction that may begin the next
attempt; and a reply stopped by its person or by staff."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db import InterfaceError, OperationalError, transaction

from ... import sql
from ...context.assembly import PENDING
from ...context.handoffs import (
    handoff_after_turn,
    handoff_latest_statement,
    handoff_of,
)
from ...context.memory import memory_remember_all
from ...database.clock import db_now
from ...errors import (
    InvalidTransition,
    NextAttemptFailed,
)
from ...live.events import publish_message_changed
from ...models import Conversation, Message, Run, StaffAction
from ...ops.faults import fault_point
from ..audit import staff_action_record
from ..heartbeats import outage_note
from ..inbox import conversation_enqueue
from .lease import lease_and_next_statement, next_attempt_of
from .locking import checkpoint_insert, conversation_lock, conversation_read, fence_held

logger = logging.getLogger(__name__)


B = TypeVar("B")


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
