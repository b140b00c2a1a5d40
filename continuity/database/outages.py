"""Telling a database that cannot serve now from a statement that is wrong.

Django raises OperationalError for both: a refused or lost connection, and also a syntax error
on SQLite, a bad parameter, a deadlock. Only the first kind is an outage, answered with "try
again"; the second is a bug, and blaming the database for it would hide it.
"""

from __future__ import annotations

import sqlite3

import psycopg
import psycopg_pool
from django.db import InterfaceError, OperationalError

# SQLSTATEs of a server that is going away or not there yet: class 08 (connection exception),
# admin_shutdown (a restart), crash_shutdown, cannot_connect_now (still starting up), and
# lock_not_available: lock_timeout fired on a row another session holds, which says nothing
# about this statement and passes when the holder lets go.
SERVER_AWAY = {"57P01", "57P02", "57P03", "55P03"}
# SQLite's counterparts: another connection holds the write lock past the busy timeout, or the
# file cannot be opened.
SQLITE_AWAY = {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_CANTOPEN"}


def database_unreachable(error: BaseException) -> bool:
    """Whether `error` means the database could not serve the statement (an outage), rather
    than that the statement was wrong (a bug)."""
    if isinstance(error, InterfaceError):
        return True  # Django's "connection already closed": lost earlier in this request
    if not isinstance(error, OperationalError):
        return False
    cause = error.__cause__
    if isinstance(cause, psycopg_pool.PoolTimeout):
        return True  # no connection came within the pool's timeout: a timeout on connect
    if isinstance(cause, psycopg.Error):
        # No SQLSTATE: the server never answered (refused, timed out, or the connection broke).
        return (
            cause.sqlstate is None
            or cause.sqlstate.startswith("08")
            or (cause.sqlstate in SERVER_AWAY)
        )
    if isinstance(cause, sqlite3.Error):
        return getattr(cause, "sqlite_errorname", None) in SQLITE_AWAY
    return False
