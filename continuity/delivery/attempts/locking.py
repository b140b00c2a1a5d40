"""An attempt's locks and fence: the conversation's row lock, and the running run that every
write of the attempt is fenced on (its id is the fencing token: an attempt that was reaped or
interrupted cannot write)."""

from __future__ import annotations

import os
import socket
from typing import TypeVar

from django.db.models import Model

from ... import sql
from ...database.clock import db_now
from ...errors import (
    AttemptStopped,
)
from ...models import Checkpoint, Conversation, Run

M = TypeVar("M", bound=Model)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


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


def run_lock_owned(run: Run) -> None:
    """Inside a transaction: hold the run's row and make sure this attempt still owns it."""
    owned = sql.row(
        f"SELECT 1 FROM continuity_run WHERE id = %s AND state = %s{sql.for_update()}",
        [run.pk, Run.State.RUNNING],
    )
    if owned is None:
        raise AttemptStopped(f"Run {run.pk} no longer owns message {run.message_id}.")
