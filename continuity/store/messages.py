"""Messages on the hot path: the queue's next message, a message accepted, bumped, answered."""

from __future__ import annotations

from typing import NamedTuple

from ..models import Message, Run
from . import connection
from .query import Query, changed, first_value, inserting
from .runs import run_in_state

# The conditions of the message table's partial indexes, written out for the hand-written
# statements, on the one table they read (unqualified). The values are written out, not
# bound: only then does a statement prepared once for any values know it may read the index.
# They are `models.WAITING` and `models.ANSWERED_QUESTION`, which tests/continuity/
# test_indexes.py checks against the indexes PostgreSQL holds.
# User messages that wait for their answer (queued, or being answered): `message_waiting`.
WAITING = "role = '{}' AND state IN ('{}', '{}')".format(Message.Role.USER, *Message.WAITING_STATES)
# Those of one conversation; its one value is the conversation's id.
CONVERSATION_WAITING = f"conversation_id = %s AND {WAITING}"
# The answered questions of the shown branch: `message_answered_question`.
ANSWERED_QUESTION = (
    f"role = '{Message.Role.USER}' AND state = '{Message.State.DONE}' AND hidden_with_id IS NULL"
)


class LeaseAndNext(NamedTuple):
    leased: bool  # a live attempt holds the conversation's lease
    message: Message | None  # its oldest waiting message


def lease_and_next(conversation_id: int) -> Query[LeaseAndNext]:
    """Whether a live attempt holds the conversation's lease, and its oldest waiting message.
    A statement of its own, run after the lock's: a subquery of the locking statement would
    read a snapshot taken before the wait for the lock, missing a lease taken meanwhile. The
    running state is written out, not bound: only then may a plan kept for every conversation
    read the index of running runs (`run_one_running_per_conversation`), not every past run."""

    def read(found: list[tuple]) -> LeaseAndNext:
        ((leased, pk, text, attempts, interruptions, version_of_id),) = found
        if pk is None:
            return LeaseAndNext(bool(leased), None)
        message = connection.instance(
            Message,
            id=pk,
            conversation_id=conversation_id,
            role=Message.Role.USER,
            text=text,
            attempts=attempts,
            interruptions=interruptions,
            version_of_id=version_of_id,
        )
        return LeaseAndNext(bool(leased), message)

    return Query(
        "SELECT EXISTS (SELECT 1 FROM continuity_run WHERE conversation_id = %s "
        f"AND state = '{Run.State.RUNNING}'), m.id, m.text, m.attempts, m.interruptions, "
        "m.version_of_id "
        "FROM (SELECT 1) AS one LEFT JOIN continuity_message AS m ON m.id = ("
        f"SELECT id FROM continuity_message WHERE {CONVERSATION_WAITING} ORDER BY id LIMIT 1)",
        [conversation_id, conversation_id],
        read,
    )


def message_bump(*, message_id: int, **changes) -> Query[bool]:
    """Apply changes to a message (values by column name) and bump its version, so browsers
    render it again."""
    assignments = "".join(f", {column} = %s" for column in changes)
    return Query(
        f"UPDATE continuity_message SET version = version + 1{assignments} WHERE id = %s "
        "RETURNING id",
        [*changes.values(), message_id],
        changed,
    )


def message_insert(*, where: connection.Statement | None = None, **values) -> Query[Message | None]:
    """Store a message (see `inserting`)."""
    return inserting(Message, where=where, **values)


def reply_insert(*, run: Run, run_state: str, **values) -> Query[Message | None]:
    """The reply to the run's message, stored only once the run has ended in `run_state` (the
    fence) and only if the message has no reply yet."""
    ended = run_in_state(run, run_state)
    return message_insert(
        where=(
            f"{ended[0]} AND NOT EXISTS (SELECT 1 FROM continuity_message WHERE reply_to_id = %s)",
            [*ended[1], run.message_id],
        ),
        conversation_id=run.conversation_id,
        role=Message.Role.ASSISTANT,
        state=Message.State.DONE,
        reply_to_id=run.message_id,
        **values,
    )


def message_answered(*, message_id: int, conversation_id: int) -> Query[bool]:
    """Mark the message done: whether more of the conversation's messages wait after it. False
    when the message is gone (its conversation was deleted meanwhile): the run went with it, so
    the attempt's fence stops it, and nothing the round trip wrote is kept."""
    return Query(
        "UPDATE continuity_message SET version = version + 1, state = %s WHERE id = %s "
        "RETURNING EXISTS (SELECT 1 FROM continuity_message "
        f"WHERE {CONVERSATION_WAITING} AND id <> %s)",
        [Message.State.DONE, message_id, conversation_id, message_id],
        lambda found: bool(found) and bool(first_value(found)),
    )
