"""PostgreSQL seen from outside the test's own use of it: what its connection sent and
received (libpq's trace), and another session."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

import psycopg
from django.db import connection


def protocol_of(run: Callable[[], object]) -> list[tuple[str, str, str]]:
    """The messages this connection sent (F) and received (B) while `run` ran, from libpq's
    trace: (direction, message type, its first field)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile("w+") as trace:
        # libpq writes through a stream of its own that is never closed: give it its own fd.
        pgconn.trace(os.dup(trace.fileno()))
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            run()
        finally:
            pgconn.untrace()
        trace.seek(0)
        fields = [line.split("\t") for line in trace.read().splitlines()]
    return [(each[0], each[2], each[3].strip() if len(each) > 3 else "") for each in fields]


def sent(protocol: list[tuple[str, str, str]]) -> list[str]:
    """The client's messages: each statement by its Bind (the one message every run of a
    prepared statement sends), and the pipeline's Syncs and Flushes."""
    return [kind for direction, kind, _ in protocol if direction == "F" and kind != "Parse"]


def another_session(*, dbname: str = "", autocommit: bool = True) -> psycopg.Connection:
    """A connection of its own to the test database (or to `dbname` on its server); `with`
    closes it."""
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname=dbname or db["NAME"],
        autocommit=autocommit,
    )
