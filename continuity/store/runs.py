"""An attempt's run on the hot path: opened, fenced, ended, and the rows it writes.

The run's id is the fencing token: every write of the attempt is stored only while its run is
still running, so an attempt that was reaped or interrupted cannot write."""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model

from ..database.clock import db_now
from ..models import Checkpoint, ReplyChunk, Run
from . import connection
from .query import Query, changed, inserting

M = TypeVar("M", bound=Model)


def run_insert(**values) -> Query[Run]:
    """Open an attempt's run (the conversation's lease: a partial unique index allows one
    running run per conversation), as `Run.objects.create(**values)` would."""
    return inserting(Run, **values)


def run_end(*, run: Run, state: str, error: str = "") -> Query[bool]:
    """End the running run in `state`: False when it was no longer running (fenced off)."""
    return Query(
        f"UPDATE continuity_run SET state = %s, ended_at = {db_now()}, error = %s "
        "WHERE id = %s AND state = %s RETURNING id",
        [state, error, run.pk, Run.State.RUNNING],
        changed,
    )


def run_lock_owned(run: Run) -> Query[bool]:
    """Hold the run's row: False when it is no longer running."""
    return Query(
        f"SELECT 1 FROM continuity_run WHERE id = %s AND state = %s{connection.for_update()}",
        [run.pk, Run.State.RUNNING],
        changed,
    )


def run_in_state(run: Run, state: str, *, lock: str = "") -> connection.Statement:
    """The condition that the run is in `state`."""
    return (
        f"EXISTS (SELECT 1 FROM continuity_run WHERE id = %s AND state = %s{lock})",
        [run.pk, state],
    )


def run_owns(run: Run, *, lock: str = "") -> connection.Statement:
    """The condition that the attempt's run still owns its message (the fence)."""
    return run_in_state(run, Run.State.RUNNING, lock=lock)


def fenced_insert(model: type[M], *, run: Run, **values: object) -> Query[bool]:
    """The INSERT of a row of the attempt, stored only while its run still owns the message, in
    one statement, so no reaping falls between the check and the insert; on PostgreSQL the
    run's row is share-locked, so a reaper ending the run at this moment is waited for. False
    when fenced off."""
    statement, _ = connection.insert_statement(
        model,
        where=run_owns(run, lock=connection.for_share()),
        message_id=run.message_id,
        run_id=run.pk,
        **values,
    )
    return Query(*statement, changed)


def fenced_inserting(model: type[M], *, run: Run, **values: object) -> Query[M | None]:
    """As `fenced_insert`, reading back the stored row: None when fenced off."""
    return inserting(
        model,
        where=run_owns(run, lock=connection.for_share()),
        message_id=run.message_id,
        run_id=run.pk,
        **values,
    )


def checkpoint_insert(*, run: Run, name: str, output: dict) -> Query[bool]:
    return fenced_insert(Checkpoint, run=run, step=name, output=output)


def chunk_insert(*, run: Run, seq: int, text: str) -> Query[bool]:
    return fenced_insert(ReplyChunk, run=run, seq=seq, text=text)


def checkpoints_stored(*, message_id: int) -> Query[dict[str, dict]]:
    """The checkpoints earlier attempts stored for the message, by step."""
    return Query(
        "SELECT step, output FROM continuity_checkpoint WHERE message_id = %s",
        [message_id],
        lambda found: {step: connection.json_value(output) for step, output in found},
    )
