"""The database's clock: what every host agrees on, however skewed the hosts' own clocks are.
Heartbeats, leases, backoffs and the history are written and compared on it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.utils.dateparse import parse_datetime


def db_now_plus(delta: timedelta) -> ExpressionWrapper:
    """A moment on the database's clock, for the ORM."""
    return ExpressionWrapper(Now() + delta, output_field=DateTimeField())


def db_now() -> str:
    """The database's clock in hand-written SQL, as Django's `Now()` writes it."""
    if connections[DEFAULT_DB_ALIAS].vendor == "postgresql":
        return "STATEMENT_TIMESTAMP()"
    return "STRFTIME('%%Y-%%m-%%d %%H:%%M:%%f', 'NOW')"


def database_now() -> datetime:
    """The database's clock, read: the moment `db_now()` would write."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(f"SELECT {db_now()}", [])  # with parameters: SQLite's %% become %
        return datetime_value(cursor.fetchone()[0])


def datetime_value(value: datetime | str | None) -> datetime | None:
    """A timestamp column as read back: SQLite holds UTC without a time zone."""
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value
