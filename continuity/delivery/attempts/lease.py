"""Beginning an attempt: it takes the conversation's lease, a running Run row (a partial unique
index allows one per conversation), counted on the message before any of its work."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from django.db import InterfaceError, OperationalError, transaction

from ... import store
from ...live.events import publish_message_changed
from ...models import Conversation, CrashRecord, Message, Run
from ...store import conversations, messages, runs
from ..heartbeats import outage_note, stale_run_ids
from ..inbox import message_bump
from ..workers import current_incarnation
from .failures import runs_reap
from .locking import worker_identity


def waiting_messages(conversation_id: int):
    return Message.objects.filter(conversation_id=conversation_id).waiting().order_by("id")


# The attempts begun in the transaction that `attempts_committing` holds.
_begun_here: ContextVar[list[int] | None] = ContextVar("attempts_begun_here", default=None)


@contextmanager
def attempts_committing() -> Iterator[None]:
    """The outermost transaction of a worker in which attempts may begin (`attempt_open`).

    When a database error ends it, its commit's answer may be what was lost: a COMMIT sent with
    the transaction's last statements (`store.round_trip`) or at the block's exit reaches the
    server, and the connection dies before the answer comes back. Whether it took is unknown.
    Had it, each attempt begun here is running and no one runs it: each is noted
    (`outage_note`), so that when the watchdog reaps it, it is an interruption, not a crash. A
    note on an attempt that never committed names no row, and expires."""
    begun: list[int] = []
    token = _begun_here.set(begun)
    try:
        with transaction.atomic():
            yield
    except Exception as error:
        if begun and database_lost(error):
            for run_id in begun:
                outage_note(run_id)
        raise
    finally:
        _begun_here.reset(token)


def database_lost(error: BaseException | None) -> bool:
    """Whether a database error raised this one, or is it (`NextAttemptFailed` wraps one)."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OperationalError | InterfaceError):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


@dataclass(frozen=True)
class Lease:
    """The conversation's lease as it stood under the conversation's lock."""

    conversation: Conversation | None  # as the lock read it
    message: Message | None  # the message an attempt may begin on now, if any
    held: bool  # another attempt holds the lease


@contextmanager
def lease_taken(conversation_id: int) -> Iterator[Lease]:
    """The transaction in which an attempt may begin on the conversation's oldest waiting
    message (`attempt_open`): the conversation locked, and its lease read, in one round trip.
    Its `message` is None when there is nothing to do now (paused, backing off, empty, or
    another live attempt holds the lease). Once the transaction ends, a lease held by an
    attempt whose heartbeat lapsed is reaped: its worker died."""
    with attempts_committing():
        lock = conversations.conversation_lock(conversation_id)
        next_message = messages.lease_and_next(conversation_id)
        found = store.round_trip(lock, next_message)
        lease = lease_of(found[lock], found[next_message])
        yield lease
    if lease.held:
        # Asked once the lock is released: Redis may take a while to answer, and the lock
        # blocks writers.
        runs_reap(
            run_ids=stale_run_ids(Run.objects.filter(conversation_id=conversation_id)),
            detected_by=CrashRecord.Detector.DRAIN,
        )


def attempt_begin(*, conversation_id: int, node: str = "") -> Run | None:
    """Start an attempt on the conversation's oldest waiting message, or None when there is
    nothing to do now (`lease_taken`)."""
    with lease_taken(conversation_id) as lease:
        if lease.message is None:
            return None
        run, _ = attempt_open(conversation=lease.conversation, message=lease.message, node=node)
    return run


def lease_of(conversation: Conversation | None, lease: messages.LeaseAndNext) -> Lease:
    """From the conversation as its lock read it (`conversations.conversation_lock`, or
    another statement that locks it as that one does) and the lease read after the lock."""
    if conversation is None or conversation.state != Conversation.State.ACTIVE:
        return Lease(conversation, None, held=False)
    if lease.leased or conversation.backing_off:
        return Lease(conversation, None, held=lease.leased)
    return Lease(conversation, lease.message, held=False)


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


def attempt_open(
    *,
    conversation: Conversation,
    message: Message,
    node: str,
    reads: Sequence[store.Query] = (),
) -> tuple[Run, store.Found]:
    """Inside `lease_taken`'s transaction, with the conversation locked and its lease free:
    count the attempt on `message` and take the lease, and run `reads` in the same round trip.
    The run, and what its reads found. What the caller stores next in the transaction commits
    with the attempt's counter (one commit fewer per message)."""
    begun_here = _begun_here.get()
    if begun_here is None:  # its beginning's commit could be lost unnoted
        raise RuntimeError("An attempt begins only inside attempts_committing().")
    attempt = message.attempts + 1
    opened = runs.run_insert(
        conversation_id=conversation.pk,
        message_id=message.pk,
        attempt=attempt,
        node=node,
        incarnation=current_incarnation(),
        worker=worker_identity(),
    )
    # Committed before any work, so an attempt that dies still counts (poison detection).
    counted = messages.message_bump(
        message_id=message.pk, attempts=attempt, state=Message.State.PROCESSING
    )
    found = store.round_trip(counted, opened, *reads)
    message.conversation = conversation
    message.attempts, message.state = attempt, Message.State.PROCESSING
    run = found[opened]
    run.conversation, run.message = conversation, message
    begun_here.append(run.pk)
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    )
    return run, found
