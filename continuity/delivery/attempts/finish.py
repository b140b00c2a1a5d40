"""Finishing an attempt: its reply stored, fenced, in the transaction that may begin the next
attempt (also the stopped reply a person or staff ask for: `actions.replies`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import transaction

from ... import store
from ...context.handoffs import handoff_after_reply
from ...context.memory import memory_remember_all
from ...live.events import publish_message_changed
from ...models import Conversation, Message, Run
from ...ops.faults import fault_point
from ...store import contexts, conversations, messages, runs
from ..drains import conversation_enqueue
from .lease import Lease, attempts_committing, lease_of
from .locking import fence_held

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stored:
    """What `reply_store` stored and found."""

    reply: Message
    more_waiting: bool  # more of the conversation's messages wait
    conversation: Conversation | None  # as its lock read it (`conversations.conversation_lock`)
    found: store.Found  # what the statements `then` found


def reply_store(
    *,
    run: Run,
    text: str,
    run_state: str,
    error: str = "",
    stopped: bool = False,
    cut_off: bool = False,
    first: Sequence[store.Query[bool]] = (),
    then: Sequence[store.Query] = (),
    follow_up: bool = True,
) -> Stored:
    """Inside the caller's transaction, in one round trip: lock the conversation (clearing
    its backoff), run `first` (fenced writes of the attempt), end the run in `run_state`,
    store `text` as the reply, mark the message done and let the conversation's next queued
    message go on: a drain is sent for it once the transaction commits, unless the caller
    answers it itself (`follow_up` False). `then`: reads run last, under the lock.

    Ending the run is the fence: an attempt that no longer owns the message stores nothing
    (the reply is stored only once the run has ended in `run_state`, and the caller's
    transaction rolls back the rest)."""
    lock = conversations.backoff_clear(run.conversation_id)
    ended = runs.run_end(run=run, state=run_state, error=error)
    reply = messages.reply_insert(
        run=run, run_state=run_state, text=text, stopped=stopped, cut_off=cut_off
    )
    answered = messages.message_answered(
        message_id=run.message_id, conversation_id=run.conversation_id
    )
    found = store.round_trip(lock, *first, ended, reply, answered, *then)
    fence_held(run, *(found[write] for write in first), found[ended])
    more_waiting = found[answered]
    if more_waiting and follow_up:
        conversation_enqueue(conversation_id=run.conversation_id)
    transaction.on_commit(
        lambda: publish_message_changed(
            conversation_id=run.conversation_id, message_id=run.message_id
        )
    )
    return Stored(
        reply=found[reply], more_waiting=more_waiting, conversation=found[lock], found=found
    )


@dataclass(frozen=True)
class Finished:
    """How the reply's end left the conversation's queue."""

    # More wait, no drain was sent for them, and their lease was not read: the caller answers
    # the next.
    more_waiting: bool = False
    # With `lease_next`, when more wait: the lease as the reply's transaction left it. An
    # attempt on its `message` may begin in that transaction (`attempt_open`).
    next: Lease | None = None


@contextmanager
def reply_committing() -> Iterator[None]:
    """The transaction that stores a reply (`reply_finish`), and may begin the attempt on the
    next message: one commit, and its flush to disk, fewer per message. That attempt's
    counter still commits before any of its work."""
    with attempts_committing():
        yield
    fault_point("after_reply_committed")


def attempt_finish(
    *,
    run: Run,
    reply_text: str,
    cut_off: bool = False,
    handoff_changes: dict | None = None,
    remembered: dict[str, str] | None = None,
    follow_up: bool = True,
) -> Finished:
    """Store the reply in a transaction of its own (`reply_finish`)."""
    with reply_committing():
        return reply_finish(
            run=run,
            reply_text=reply_text,
            cut_off=cut_off,
            handoff_changes=handoff_changes,
            remembered=remembered,
            follow_up=follow_up,
        )


def reply_finish(
    *,
    run: Run,
    reply_text: str,
    cut_off: bool = False,
    handoff_changes: dict | None = None,
    remembered: dict[str, str] | None = None,
    follow_up: bool = True,
    lease_next: bool = False,
) -> Finished:
    """Inside `reply_committing`: store the reply, mark the message done and the run
    completed, with the handoff after the reply: written once, even when an earlier attempt
    got this far. `remembered`: the facts of the last step, stored with its checkpoint here
    (no step follows it); None when an earlier attempt stored them.

    With `follow_up` False, more waiting messages are left to the caller; with `lease_next`
    too, the next one's lease is read under the reply's lock, in its round trip."""
    first = []
    if remembered is not None:
        first.append(runs.checkpoint_insert(run=run, name="remember", output={"facts": remembered}))
    latest_handoff = contexts.handoff_latest(conversation_id=run.conversation_id)
    then = [latest_handoff]
    next_message = None
    if lease_next and not follow_up:
        # The conversation is locked, and read, by the reply's first statement.
        next_message = messages.lease_and_next(run.conversation_id)
        then.append(next_message)
    stored = reply_store(
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
    handoff_after_reply(run=run, changes=handoff_changes, latest=stored.found[latest_handoff])
    if next_message is None or not stored.more_waiting:
        return Finished(more_waiting=stored.more_waiting and not follow_up)
    return Finished(next=lease_of(stored.conversation, stored.found[next_message]))
