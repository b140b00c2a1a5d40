"""SQLite as Django's own backend has it, except that this process never forks while one of
its threads holds SQLite's locks.

A worker's main process forks a new pool process whenever one dies, while its other threads
use the database (the worker's heartbeat, ending a dead process's attempts). SQLite keeps the
locks a process holds in that process's memory, which a forked child copies, and the operating
system's locks, which it does not: a child forked while a thread of its parent was inside a
write transaction believes, for the rest of its life, that another connection of its own holds
the write lock. Each of its writes then waits the whole `timeout` (30 s) and fails with
"database is locked" (SQLite's FAQ: do not carry an open database across a fork). An idle
connection is carried across safely, so a fork here waits until no other thread is executing
a statement or inside a transaction (`fork_gate`), and the threads wait while it forks.

SQLite also takes mutexes of the whole process (its allocator's, the one that guards opening
files) in every call, not only while a statement runs: opening a connection and Django's
create_function calls, fetching rows, closing, a cursor or a connection dropped by the
garbage collector. A fork while another thread was inside one copied that mutex locked into
the child, for good: a new pool process hung at its first connection (16 forks in 1,000 made
while three threads used SQLite without a pause). So every call into SQLite holds the gate.

Carried across, a connection must also never be closed by the child: closing it there (as
Celery does in each new pool process, and as Python does to the connections of the threads
that did not follow the fork) waited on locks the child does not hold, for longer than the
pool gives a new process to say it is up ("Timed out waiting for UP message"), which then
killed it. The child keeps its parent's connections open and unused (`inherited`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from contextlib import contextmanager, suppress

from django.db.backends.sqlite3 import base

logger = logging.getLogger(__name__)

# A thread holds the gate for at most one statement or one transaction, and SQLite bounds each
# wait for a lock by the connection's `timeout`: a fork that waited longer than this goes ahead
# and says so, rather than stop the worker's event loop for good.
FORK_WAIT_SECONDS = 60.0


class ForkGate:
    """Threads hold it while they use SQLite; a fork waits until only the forking thread does."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._holds: dict[int, int] = {}  # thread ident -> holds
        self.open: weakref.WeakSet[Connection] = weakref.WeakSet()
        # Held for the time of a fork: the child's copy keeps them from being closed there.
        self._carried: list[Connection] = []

    def hold(self) -> int:
        """Hold the gate for this thread; the ident to release it with."""
        ident = threading.get_ident()
        with self._condition:
            self._holds[ident] = self._holds.get(ident, 0) + 1
        return ident

    def release(self, ident: int) -> None:
        with self._condition:
            if self._holds.get(ident, 0) <= 1:
                self._holds.pop(ident, None)
            else:
                self._holds[ident] -= 1
            self._condition.notify_all()

    def others_holding(self) -> bool:
        me = threading.get_ident()
        return any(ident != me for ident in self._holds)

    def before_fork(self) -> None:
        # Kept until the fork is done: no thread begins a statement meanwhile.
        self._condition.acquire()
        deadline = time.monotonic() + FORK_WAIT_SECONDS
        while self.others_holding():
            left = deadline - time.monotonic()
            if left <= 0:
                logger.error("Forking while another thread holds SQLite's locks: the child's "
                             "writes may fail with 'database is locked'")  # fmt: skip
                break
            self._condition.wait(left)
        self._carried = list(self.open)

    def after_fork_in_parent(self) -> None:
        self._carried = []
        self._condition.release()

    def after_fork_in_child(self) -> None:
        # The child's only thread is the one that forked: what the others held is not its own.
        me = threading.get_ident()
        self._condition = threading.Condition()
        self._holds = {me: self._holds[me]} if me in self._holds else {}
        inherited.extend(self._carried)
        self._carried = []
        self.open = weakref.WeakSet()


# The parent's connections, in a child: kept, so that none is closed when its object goes.
inherited: list[Connection] = []


fork_gate = ForkGate()
os.register_at_fork(
    before=fork_gate.before_fork,
    after_in_parent=fork_gate.after_fork_in_parent,
    after_in_child=fork_gate.after_fork_in_child,
)


class Connection(sqlite3.Connection):
    """Holds the gate while a statement runs, while a transaction is open, and while it closes
    (the last connection to a database in WAL mode checkpoints it under an exclusive lock)."""

    _held_by: int | None = None  # the ident that holds the gate for the open transaction

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.opened_by = os.getpid()
        fork_gate.open.add(self)

    def execute(self, *args, **kwargs):
        with self.gated():
            return super().execute(*args, **kwargs)

    def commit(self) -> None:
        with self.gated():
            super().commit()

    def rollback(self) -> None:
        with self.gated():
            super().rollback()

    def cursor(self, factory=None):
        return super().cursor(factory or RawCursor)

    def close(self) -> None:
        if self.opened_by != os.getpid():
            return  # the parent's: see the module's docstring
        with self.gated():
            super().close()

    def __del__(self) -> None:
        # Closed here, through the gate, rather than by the object's deallocation.
        if getattr(self, "opened_by", None) is not None:
            self.close()

    @property
    def isolation_level(self):
        return sqlite3.Connection.isolation_level.__get__(self)

    @isolation_level.setter
    def isolation_level(self, level) -> None:
        with self.gated():  # setting it may commit
            sqlite3.Connection.isolation_level.__set__(self, level)

    @contextmanager
    def gated(self):
        ident = fork_gate.hold()
        try:
            yield
        finally:
            self.transaction_held()
            fork_gate.release(ident)

    def transaction_held(self) -> None:
        """Hold the gate while a transaction is open, and not a moment longer."""
        try:
            open_now = self.in_transaction
        except sqlite3.ProgrammingError:  # closed
            open_now = False
        if open_now and self._held_by is None:
            self._held_by = fork_gate.hold()
        elif not open_now and self._held_by is not None:
            fork_gate.release(self._held_by)
            self._held_by = None


class GatedCursor:
    """What a cursor does in SQLite, each call holding the gate."""

    def execute(self, *args, **kwargs):
        with self.connection.gated():
            return super().execute(*args, **kwargs)

    def executemany(self, *args, **kwargs):
        with self.connection.gated():
            return super().executemany(*args, **kwargs)

    def executescript(self, *args, **kwargs):
        with self.connection.gated():
            return super().executescript(*args, **kwargs)

    def fetchone(self):
        with self.connection.gated():
            return super().fetchone()

    def fetchmany(self, *args, **kwargs):
        with self.connection.gated():
            return super().fetchmany(*args, **kwargs)

    def fetchall(self):
        with self.connection.gated():
            return super().fetchall()

    def __next__(self):
        with self.connection.gated():
            return super().__next__()

    def close(self) -> None:
        with self.connection.gated(), suppress(sqlite3.ProgrammingError):
            super().close()  # refused once its connection is closed, when there is nothing to do

    def __del__(self) -> None:
        self.close()


class RawCursor(GatedCursor, sqlite3.Cursor):
    """A cursor asked of the connection itself: Django's last_executed_query makes one for
    every query it logs (DEBUG, as `make run` has it)."""


class Cursor(GatedCursor, base.SQLiteCursorWrapper):
    """Django's cursor ("format" parameters turned into SQLite's), gated."""


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        return {**super().get_connection_params(), "factory": Connection}

    def get_new_connection(self, conn_params):
        ident = fork_gate.hold()
        try:
            return super().get_new_connection(conn_params)
        finally:
            fork_gate.release(ident)

    def create_cursor(self, name=None):
        return self.connection.cursor(factory=Cursor)
