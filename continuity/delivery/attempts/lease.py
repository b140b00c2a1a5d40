"""Beginning an attempt: it takes the conversation's lease, a running Run row (a partial unique
index allows one per conversation), counted on the message before any of its work."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

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

# What an attempt reads in the round trip that begins it (`attempt_begin`'s `reads`), and
# how it is given what they found (`on_begin`).
Reads = Callable[[Message], Sequence[store.Query]]
OnBegin = Callable[[Run, Message, store.Found], object]


def pending_messages(conversation_id: int):
    return Message.objects.filter(conversation_id=conversation_id).waiting().order_by("id")


# The attempts begun in the transaction that `attempts_committing` holds.
_begun_here: ContextVar[list[int] | None] = ContextVar("attempts_begun_here", default=None)


@contextmanager
def attempts_committing() -> Iterator[None]:
    """The outermost transaction of a worker in which attempts may begin (`attempt_start`).

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


def attempt_begin(
    *,
    conversation_id: int,
    node: str = "",
    reads: Reads | None = None,
    on_begin: OnBegin | None = None,
) -> Run | None:
    """Start an attempt on the conversation's oldest pending message, or None when there is
    nothing to do now (paused, backing off, empty, or another live attempt holds the lease).
    `on_begin` runs in the same transaction, with the lease held: what it stores commits with
    the attempt counter (one commit fewer per message). It is given what the `reads` of the
    message found, in the round trip that opens the attempt."""
    begun = None
    with attempts_committing():
        lock = conversations.conversation_lock(conversation_id)
        lease = messages.lease_and_next(conversation_id)
        found = store.round_trip(lock, lease)
        conversation, message, leased = next_attempt_of(found[lock], found[lease])
        if message is not None:
            begun = attempt_start(
                conversation=conversation,
                message=message,
                node=node,
                reads=reads,
                on_begin=on_begin,
            )
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


def next_attempt_of(
    conversation: Conversation | None, lease: messages.LeaseAndNext
) -> tuple[Conversation | None, Message | None, bool]:
    """From the conversation as its lock read it (`conversations.conversation_lock`, or
    another statement that locks it as that one does) and the lease read after the lock: the
    locked conversation, the message an attempt may begin on now (None when the conversation
    is paused, backing off, empty, or another live attempt holds its lease), and whether one
    does."""
    if conversation is None or conversation.state != Conversation.State.ACTIVE:
        return conversation, None, False
    if lease.leased or conversation.backing_off:
        return conversation, None, lease.leased
    return conversation, lease.message, False


def attempt_start(
    *,
    conversation: Conversation,
    message: Message,
    node: str,
    reads: Reads | None = None,
    on_begin: OnBegin | None = None,
) -> Run:
    """Inside the caller's transaction, with the conversation locked and its lease free: begin
    the attempt on `message` (see `attempt_begin`)."""
    begun_here = _begun_here.get()
    if begun_here is None:  # its beginning's commit could be lost unnoted
        raise RuntimeError("An attempt begins only inside attempts_committing().")
    message.conversation = conversation  # the reads need its owner
    run, read = attempt_open(
        conversation=conversation,
        message=message,
        node=node,
        reads=reads(message) if reads is not None else (),
    )
    begun_here.append(run.pk)
    if on_begin is not None:
        on_begin(run, message, read)
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


def attempt_open(
    *,
    conversation: Conversation,
    message: Message,
    node: str,
    reads: Sequence[store.Query] = (),
) -> tuple[Run, store.Found]:
    """With the conversation locked: count the attempt on the message and take the lease, and
    run `reads` in the same round trip. The run, and what was found."""
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
    message.attempts, message.state = attempt, Message.State.PROCESSING
    run = found[opened]
    run.conversation, run.message = conversation, message
    return run, found
