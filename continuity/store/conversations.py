"""The conversation's row on the hot path: its lock, and the times an attempt or a send stamps."""

from __future__ import annotations

from ..database.clock import db_now
from ..models import Conversation
from . import connection
from .query import Query, changed

# What an attempt reads of its locked conversation: see `locked`.
LOCKED_COLUMNS = "id, owner_id, state, brain, retry_at IS NOT NULL AND retry_at > {now}"


def locked(found: list[tuple]) -> Conversation | None:
    """The locked row, with what an attempt reads (the other fields load on access) and
    `backing_off`, judged on the database's clock."""
    if not found:
        return None
    ((pk, owner_id, state, brain, backing_off),) = found
    conversation = connection.instance(
        Conversation, id=pk, owner_id=owner_id, state=state, brain=brain
    )
    conversation.backing_off = bool(backing_off)
    return conversation


def conversation_lock(conversation_id: int) -> Query[Conversation | None]:
    """Every transaction that changes an attempt locks its conversation first, then the run,
    then messages: one order everywhere, so no two of them can deadlock."""
    return Query(
        f"SELECT {LOCKED_COLUMNS.format(now=db_now())} FROM continuity_conversation "
        f"WHERE id = %s{connection.for_update()}",
        [conversation_id],
        locked,
    )


def backoff_clear(conversation_id: int) -> Query[Conversation | None]:
    """A reply is stored: lock the conversation as `conversation_lock` does, and end its backoff."""
    now = db_now()
    return Query(
        f"UPDATE continuity_conversation SET retry_at = NULL, updated_at = {now} "
        f"WHERE id = %s RETURNING {LOCKED_COLUMNS.format(now=now)}",
        [conversation_id],
        locked,
    )


def message_added(conversation_id: int) -> Query[str | None]:
    """A message joins the queue: lock the conversation (message ids then follow commit order,
    the order it is answered in), and stamp its change and its drain's send. What its backoff
    waits for (Conversation.WaitingFor); None without the conversation."""
    now = db_now()
    return Query(
        f"UPDATE continuity_conversation SET updated_at = {now}, enqueued_at = {now} "
        "WHERE id = %s RETURNING waiting_for",
        [conversation_id],
        lambda found: found[0][0] if found else None,
    )


def drain_sent(conversation_id: int, *, unsent: bool = False) -> Query[bool]:
    """When a drain was last sent (`unsent`: none, a send failed): the watchdog's clock for
    "lost"."""
    return Query(
        f"UPDATE continuity_conversation SET enqueued_at = {'NULL' if unsent else db_now()} "
        "WHERE id = %s RETURNING id",
        [conversation_id],
        changed,
    )
