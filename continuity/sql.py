"""Hand-written SQL for the engine's hot path (one message's begin, steps and finish).

Why not the ORM there: building a query costs 0.3–1.5 ms of CPU per statement on the machines
this runs on, often more than the statement's round trip, and a message makes about twenty
(docs/benchmarks.md). Everything else uses the ORM. The SQL here runs on PostgreSQL and on the
SQLite that `make run` falls back to: no data-modifying CTEs, row locks only where the database
has them, the database clock and values converted through the helpers below.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TypeVar

from django.db import connection
from django.db.models import Model
from django.utils.dateparse import parse_datetime

M = TypeVar("M", bound=Model)


def rows(sql: str, params: list | tuple = ()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def row(sql: str, params: list | tuple = ()) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def execute(sql: str, params: list | tuple = ()) -> int:
    """The number of rows the statement changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def for_update() -> str:
    """A row lock, where the database has them (SQLite locks the whole database instead)."""
    return " FOR UPDATE" if connection.features.has_select_for_update else ""


def for_share() -> str:
    return " FOR SHARE" if connection.features.has_select_for_update else ""


def db_now() -> str:
    """The database's clock, as Django's `Now()` writes it: hosts with skewed clocks agree."""
    if connection.vendor == "postgresql":
        return "STATEMENT_TIMESTAMP()"
    return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')"


def datetime_param(value: datetime) -> object:
    return connection.ops.adapt_datetimefield_value(value)


def datetime_value(value: datetime | str | None) -> datetime | None:
    """A timestamp column as read back: SQLite returns text in UTC."""
    if isinstance(value, str):
        value = parse_datetime(value)
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
    return value


def json_value(value: str | None) -> object:
    """A JSON column as read back: text on both databases (Django loads PostgreSQL's jsonb as
    text, and JSONField decodes it)."""
    return None if value is None else json.loads(value)


def instance(model: type[M], **values: object) -> M:
    """A model instance loaded with these values (by attname), as a query would load it: the
    fields not given are deferred and load on access, never left at their defaults."""
    given = [field.attname for field in model._meta.concrete_fields if field.attname in values]
    return model.from_db(connection.alias, given, [values[name] for name in given])
