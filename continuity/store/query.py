"""A statement of the store, as its callers hold it: its SQL, its values, and how its rows are
read (into a NamedTuple, a model instance or a plain value). A round trip returns what each of
its statements found, looked up by the statement itself, never by position."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from django.db.models import Model

from . import connection

R = TypeVar("R")
Row = TypeVar("Row", bound=NamedTuple)
M = TypeVar("M", bound=Model)


@dataclass(frozen=True, eq=False, slots=True)
class Query(Generic[R]):
    """One statement. Compared by identity: it is the handle of its own result."""

    sql: str
    params: Sequence
    read: Callable[[list[tuple]], R]


class Found:
    """What the statements of one round trip found, by statement."""

    __slots__ = ("_by_query",)

    def __init__(self, by_query: dict[Query, Any]) -> None:
        self._by_query = by_query

    def __getitem__(self, query: Query[R]) -> R:
        return self._by_query[query]


def round_trip(*queries: Query, commit: bool = False) -> Found:
    """Run statements that need none of each other's results in one round trip, in order
    (`connection.batch`, which says what `commit` does), and read what each found."""
    found = connection.batch(*((query.sql, query.params) for query in queries), commit=commit)
    return Found({query: query.read(rows) for query, rows in zip(queries, found, strict=True)})


def execute(query: Query[R]) -> R:
    """One statement in a round trip of its own."""
    return query.read(connection.rows(query.sql, query.params))


def inserting(
    model: type[M], *, where: connection.Statement | None = None, **values
) -> Query[M | None]:
    """Store a row as `model.objects.create(**values)` would (values by attname): the stored
    instance. Under `where`, only if that condition holds (None when it does not)."""
    statement, written = connection.insert_statement(model, where=where, **values)
    return Query(*statement, lambda found: connection.inserted(model, found, written))


def unflushed_commit() -> list[Query[list[tuple]]]:
    """For a transaction whose writes are not worth a wait for the disk, as its first statement
    (`connection.unflushed_commit`)."""
    return [Query(text, params, list) for text, params in connection.unflushed_commit()]


def changed(found: list[tuple]) -> bool:
    """Whether a write changed (or stored) its row: it said RETURNING, and returned one."""
    return bool(found)


def first_value(found: list[tuple]) -> Any:
    """The one value of a statement that returns one row of one column."""
    ((value,),) = found
    return value


def every(row: type[Row]) -> Callable[[list[tuple]], list[Row]]:
    """The statement's rows, each as `row`."""

    def read(found: list[tuple]) -> list[Row]:
        return [row._make(each) for each in found]

    return read
