"""Running the store's statements: a cursor that binds values on the server, several
statements in one round trip, and rows stored and read as the ORM would.

The SQL of the store runs on PostgreSQL and on the SQLite that `make run` falls back to: no
data-modifying CTEs, row locks only where the database has them, the database clock and
values converted through the helpers below. Only the store imports this module (an import
contract in pyproject.toml); the rest of the engine holds `Query`s.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import NOT_PROVIDED, Field, Model
from django.utils import timezone

if TYPE_CHECKING:
    from psycopg import Pipeline

M = TypeVar("M", bound=Model)
# A statement and its values.
Statement = tuple[str, Sequence]
_batches = itertools.count(1)


def _db() -> BaseDatabaseWrapper:
    """The default database's connection of this thread. Looked up once per call here: each
    attribute read through `django.db.connection` looks it up again (a tenth of a drain's CPU
    went to those lookups)."""
    return connections[DEFAULT_DB_ALIAS]


def cursor() -> CursorWrapper:
    """On PostgreSQL, a cursor that binds values on the server, so each statement here is
    prepared once per connection (the settings' `prepare_threshold`) and then only executed:
    no quoting in Python, no parsing in the server, and after a few runs no planning either
    (each statement is written so that a plan made for any value finds its rows through the
    index made for them: `tests/continuity/test_attempts`). The ORM's cursors bind on the
    client and are never prepared. Wrapped like Django's own cursors: database errors become
    Django's, and execute wrappers (statement counts) see every statement."""
    db = _db()
    if db.vendor != "postgresql":
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    return _bound_cursor(db)


def _bound_cursor(db: BaseDatabaseWrapper) -> CursorWrapper:
    with db.wrap_database_errors:
        bound = _server_binding_cursor()(db.connection)
    if db.queries_logged:
        return LoggedCursor(bound, db)
    return db.make_cursor(bound)


@functools.cache
def _server_binding_cursor() -> type:
    from django.db.backends.postgresql.base import ServerBindingCursor

    return ServerBindingCursor


class LoggedCursor(CursorDebugWrapper):
    """Logs each statement with its values, as the ORM's cursors do (Django cannot read a
    server-bound statement's text back)."""

    def execute(self, sql: str, params: Sequence = ()) -> None:
        with self.debug_sql(self.db.ops.compose_sql(sql, params)):
            return CursorWrapper.execute(self, sql, params)


def rows(sql: str, params: Sequence = ()) -> list[tuple]:
    with cursor() as found:
        found.execute(sql, params)
        return found.fetchall()


def row(sql: str, params: Sequence = ()) -> tuple | None:
    with cursor() as found:
        found.execute(sql, params)
        return found.fetchone()


def execute(sql: str, params: Sequence = ()) -> int:
    """The number of rows the statement changed."""
    with cursor() as changed:
        changed.execute(sql, params)
        return changed.rowcount


def batch(*statements: Statement, commit: bool = False) -> list[list[tuple]]:
    """Run statements that need none of each other's results in one round trip (psycopg's
    pipeline mode; one by one on SQLite), in order, and return the rows of each. Each returns
    rows (a write says RETURNING), so a write that changed nothing returns none. The server
    runs them one after the other as usual: each later one sees what the earlier ones did,
    and a statement that waits for a lock holds back those behind it. The first that fails
    raises, and the server skips the rest.

    `commit`: these are the last statements of the caller's transaction, which then commits
    in the same round trip (a round trip fewer per transaction); nothing may run in the block
    after them, or it would begin another transaction. Only an outermost `atomic` block is
    committed here: inside another (a test's), the outer one commits as usual."""
    db = _db()
    if db.vendor != "postgresql":
        return [rows(*statement) for statement in statements]
    sent = [*statements, ("COMMIT", [])] if commit and _commits_on_exit(db) else statements
    cursors = [cursor()] + [_bound_cursor(db) for _ in sent[1:]]
    try:
        with db.wrap_database_errors, db.connection.pipeline() as pipeline:
            _ends_with_sync(pipeline)
            with _sent_unread(pipeline):
                for each, (text, params) in zip(cursors, sent, strict=True):
                    each.execute(text, params)
        found = [each.fetchall() for each in cursors[: len(statements)]]
    finally:
        for each in cursors:
            each.close()
    if db.queries_logged:  # for counts of round trips (the bench)
        number = next(_batches)
        for entry in list(db.queries_log)[-len(cursors) :]:
            entry["batch"] = number
    return found


@contextlib.contextmanager
def _sent_unread(pipeline: Pipeline) -> Iterator[None]:
    """While a batch's statements are executed: each is sent at once, and no result is read
    until the pipeline ends (psycopg's internals, pinned by test_store_connection's protocol trace).

    psycopg otherwise syncs the pipeline after the BEGIN it puts before the first statement of
    a transaction: a round trip of its own, 5 of the 13 that a message took (it syncs
    because a status read after results were fetched mid-pipeline would say the transaction
    had not begun, and a second BEGIN would follow; nothing is read mid-pipeline here). It also
    waits on the socket after each statement to read any results that arrived. Without both,
    a message took a tenth less CPU, and a tenth less time one at a time, on two cores. Each
    statement is still sent at once, so the server runs it while the next one is prepared
    (sending them all at the end saved as much CPU, but little time)."""

    def sent() -> Generator[None, None, None]:
        while pipeline.command_queue:
            pipeline.command_queue.popleft()()
        pipeline.pgconn.flush()  # non-blocking: what the socket does not take is sent at the end
        yield from ()

    def not_synced() -> Generator[None, None, None]:
        yield from ()

    pipeline._communicate_gen = sent
    pipeline._sync_gen = not_synced
    try:
        yield
    finally:
        del pipeline._communicate_gen, pipeline._sync_gen


def _ends_with_sync(pipeline: Pipeline) -> None:
    """psycopg ends a pipeline with a Sync, then a Flush request. The server arms
    idle_in_transaction_session_timeout when a Sync leaves its session idle in a transaction,
    and disarms it on the next message, the Flush: a session frozen inside a transaction after
    a batch (its process stopped while it held a conversation's lock) was never ended, and
    held the lock until its process died. The Sync alone makes the server send every result;
    only what libpq still buffers needs sending. (psycopg's internals, for this pipeline
    object alone, which ends with the batch; pinned by test_store_connection's protocol trace.)"""
    from psycopg.generators import send

    fetched = pipeline._fetch_gen

    def fetched_after_sync(*, flush: bool) -> Generator[None, None, None]:
        if flush:
            yield from send(pipeline.pgconn)
        return (yield from fetched(flush=False))

    pipeline._fetch_gen = fetched_after_sync


def unflushed_commit() -> list[Statement]:
    """For a transaction whose writes are not worth a wait for the disk, as its first statement:
    its commit returns before they are flushed (PostgreSQL's synchronous_commit off, for this
    transaction only: a crash of the database may lose it). Only in an outermost `atomic`
    block: in a nested one, the transaction around it would not wait either."""
    db = _db()
    if db.vendor != "postgresql" or not _commits_on_exit(db):
        return []
    return [("SELECT set_config('synchronous_commit', 'off', true)", [])]


def _commits_on_exit(db: BaseDatabaseWrapper) -> bool:
    """Whether the current transaction is an outermost `atomic` block that will commit."""
    return (
        db.in_atomic_block
        and len(db.atomic_blocks) == 1
        and db.commit_on_exit
        and not db.needs_rollback
    )


def for_update() -> str:
    """A row lock, where the database has them (SQLite locks the whole database instead)."""
    return " FOR UPDATE" if _db().features.has_select_for_update else ""


def for_share() -> str:
    return " FOR SHARE" if _db().features.has_select_for_update else ""


def json_value(value: str | None) -> object:
    """A JSON column as read back: text on both databases (Django loads PostgreSQL's jsonb as
    text, and JSONField decodes it)."""
    return None if value is None else json.loads(value)


def instance(model: type[M], **values: object) -> M:
    """A model instance loaded with these values (by attname), as a query would load it: the
    fields not given are deferred and load on access, never left at their defaults."""
    given = [field.attname for field in model._meta.concrete_fields if field.attname in values]
    return model.from_db(DEFAULT_DB_ALIAS, given, [values[name] for name in given])


def insert_statement(
    model: type[M], *, where: Statement | None = None, **values: object
) -> tuple[Statement, dict]:
    """The INSERT of one row as `objects.create(**values)` would write it (the fields'
    defaults, auto_now, each value prepared by its field), returning its id, and the values it
    writes. Values by attname; a field with a database default is left to the database.
    `where`: a condition the row is stored under; when it fails, nothing is stored or returned."""
    db = _db()
    shape = _insert_shape(model, frozenset(values), db.vendor)
    now = timezone.now() if shape.stamped else None
    params, written = [], {}
    for field, name, constant in shape.columns:
        if constant is not _UNSET:
            value, prepared = constant
        else:
            if name in values:
                value = values[name]
            elif name in shape.stamped:
                value = now
            else:
                value = field.get_default()
            prepared = field.get_db_prep_save(value, db)
        params.append(prepared)
        written[name] = value
    if where is None:
        return (f"{shape.head} VALUES ({shape.placeholders}) {shape.returning}", params), written
    text = f"{shape.head} SELECT {shape.placeholders} WHERE {where[0]} {shape.returning}"
    return (text, [*params, *where[1]]), written


_UNSET = object()


@dataclass(frozen=True)
class _InsertShape:
    head: str
    placeholders: str
    returning: str
    # (field, attname, (its value, prepared) when it is a constant default, else _UNSET)
    columns: tuple[tuple[Field, str, object], ...]
    stamped: frozenset[str]  # auto_now fields


@functools.cache
def _insert_shape(model: type[Model], given: frozenset[str], vendor: str) -> _InsertShape:
    """What an INSERT of `model` with values for `given` writes, worked out once per shape (and
    vendor, for its quoting and preparing), constant defaults prepared once: at each insert,
    this took an accept a few percent of its CPU."""
    db = connections[DEFAULT_DB_ALIAS]
    columns, stamped = [], set()
    for field in model._meta.concrete_fields:
        name, constant = field.attname, _UNSET
        if name in given:
            pass
        elif field.primary_key or field.db_default is not NOT_PROVIDED:
            continue
        elif getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            stamped.add(name)
        elif not (field.has_default() and callable(field.default)):
            default = field.get_default()
            constant = (default, field.get_db_prep_save(default, db))
        columns.append((field, name, constant))
    names = ", ".join(db.ops.quote_name(field.column) for field, _, _ in columns)
    return _InsertShape(
        head=f"INSERT INTO {model._meta.db_table} ({names})",
        placeholders=", ".join(["%s"] * len(columns)),
        returning=f"RETURNING {model._meta.pk.column}",
        columns=tuple(columns),
        stamped=frozenset(stamped),
    )


def inserted(model: type[M], found: list[tuple], written: dict) -> M | None:
    """The row an `insert_statement` stored, from what it returned; None if it stored none."""
    if not found:
        return None
    return instance(model, **{model._meta.pk.attname: found[0][0]}, **written)


def insert(model: type[M], **values: object) -> M:
    """INSERT one row as `objects.create(**values)` would, without building a query."""
    statement, written = insert_statement(model, **values)
    return inserted(model, rows(*statement), written)
