"""A process forked while another of its threads is inside an SQLite write transaction can write
in the child (continuity/database/sqlite): the fork waits for the transaction to end. With
Django's own backend the child waits the whole timeout and fails with 'database is locked', as
a worker's pool process did after a sibling's SIGKILL on `make run`."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from django.db.utils import ConnectionHandler

from continuity.database.sqlite import base
from continuity.database.sqlite.base import fork_gate

# The child's write waits at most this long for SQLite's write lock.
LOCK_TIMEOUT = 2


@pytest.fixture
def sqlite_file(tmp_path, django_db_blocker):
    """A handler for a WAL database file of its own, configured as `make run` configures its
    database (not the suite's database: the test needs no table of the product's)."""
    django_db_blocker.unblock()
    handler = ConnectionHandler(
        {
            "default": {
                "ENGINE": "continuity.database.sqlite",
                "NAME": str(tmp_path / "fork.sqlite3"),
                "OPTIONS": {
                    "init_command": "PRAGMA journal_mode=WAL;",
                    "transaction_mode": "IMMEDIATE",
                    "timeout": LOCK_TIMEOUT,
                },
            }
        }
    )
    with handler["default"].cursor() as cursor:
        cursor.execute("CREATE TABLE entry (writer TEXT)")
    handler["default"].close()
    yield handler
    handler.close_all()
    django_db_blocker.restore()


def child_writes(handler: ConnectionHandler) -> int:
    """Fork; in the child, write one row on a new connection. The child's exit status: 0 if
    it wrote, 1 if SQLite refused."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            with handler.create_connection("default").cursor() as cursor:
                cursor.execute("INSERT INTO entry VALUES ('child')")
            status = 0
        finally:
            os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_fork_waits_for_another_threads_write_transaction(sqlite_file):
    inside, finish = threading.Event(), threading.Event()

    def writer() -> None:
        connection = sqlite_file["default"]
        with connection.cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            cursor.execute("INSERT INTO entry VALUES ('thread')")
            inside.set()
            finish.wait(10)
            cursor.execute("COMMIT")
        connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    assert inside.wait(10)
    assert fork_gate.others_holding(), "the open transaction holds the gate"
    # The fork waits for the transaction, which ends a moment later, as the heartbeat's does.
    threading.Timer(0.3, finish.set).start()
    assert child_writes(sqlite_file) == 0, "the child could not write: database is locked"
    thread.join(10)

    with sqlite_file["default"].cursor() as cursor:
        cursor.execute("SELECT writer FROM entry ORDER BY rowid")
        assert [writer for (writer,) in cursor.fetchall()] == ["thread", "child"]
    assert not fork_gate.others_holding()


def test_an_idle_connection_and_a_finished_statement_hold_nothing(sqlite_file):
    connection = sqlite_file["default"]
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO entry VALUES ('autocommit')")
        cursor.execute("SELECT count(*) FROM entry")
        assert cursor.fetchone() == (1,)
    done = threading.Event()

    def idle_elsewhere() -> None:
        other = sqlite_file["default"]
        with other.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM entry")
        done.set()

    threading.Thread(target=idle_elsewhere).start()
    assert done.wait(10)
    assert not fork_gate.others_holding()
    assert child_writes(sqlite_file) == 0


def test_a_child_never_closes_its_parents_connections(sqlite_file):
    """Closing an inherited connection in the child (Celery closes the parent's in each new pool
    process; Python drops those of the threads that did not follow the fork) waited on locks
    the child does not hold. The child keeps them, unused."""
    parent = sqlite_file["default"]
    with parent.cursor() as cursor:
        cursor.execute("INSERT INTO entry VALUES ('parent')")
    opened_elsewhere = threading.Event()
    finish = threading.Event()
    threads_own = []

    def idle_thread() -> None:
        with sqlite_file["default"].cursor() as cursor:
            cursor.execute("SELECT count(*) FROM entry")
        threads_own.append(sqlite_file["default"].connection)
        opened_elsewhere.set()
        finish.wait(10)

    thread = threading.Thread(target=idle_thread)
    thread.start()
    assert opened_elsewhere.wait(10)
    inherited = parent.connection
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            parent.close()  # as Celery's worker_process_init does
            inherited.total_changes  # noqa: B018  (raises on a connection SQLite closed)
            kept = all(
                any(carried is own for carried in base.inherited)
                for own in (inherited, *threads_own)
            )
            with sqlite_file.create_connection("default").cursor() as cursor:
                cursor.execute("INSERT INTO entry VALUES ('child')")
            status = 0 if kept else 2
        finally:
            os._exit(status)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finish.set()
    thread.join(10)

    with parent.cursor() as cursor:  # the parent's connection still works
        cursor.execute("SELECT writer FROM entry ORDER BY rowid")
        assert [writer for (writer,) in cursor.fetchall()] == ["parent", "child"]


# Forks made while other threads work through SQLite's whole interface: before the fix, 3 in
# 1,000 hung (and 16 in 1,000 when the threads did not pause).
FORKS, BUSY_THREADS = 2000, 3


def test_a_child_never_inherits_a_lock_sqlite_took_outside_a_statement(sqlite_file):
    """SQLite takes process-wide mutexes (its allocator's among them) in every call, not only
    while a statement runs: opening a connection, Django's create_function calls, fetching
    rows, closing. A fork while another thread was inside one of them left the child's copy of
    that mutex locked for good: a worker's new pool process hung at its first connection (seen
    on `make run` after a pool-process SIGKILL). Each child here must open a connection, read
    and exit."""
    with sqlite_file["default"].cursor() as cursor:
        cursor.executemany("INSERT INTO entry VALUES (?)", [(f"row {n}",) for n in range(500)])
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            connection = sqlite_file.create_connection("default")
            with connection.cursor() as cursor:
                cursor.execute("SELECT writer FROM entry")
                while cursor.fetchmany(50):
                    pass
            connection.close()
            stop.wait(0.001)  # as a worker's threads do, they pause: a fork waits for a pause

    threads = [threading.Thread(target=busy) for _ in range(BUSY_THREADS)]
    for thread in threads:
        thread.start()
    hung = 0
    try:
        for _ in range(FORKS):
            pid = os.fork()
            if pid == 0:
                try:
                    connection = sqlite_file.create_connection("default")
                    with connection.cursor() as cursor:
                        cursor.execute("SELECT count(*) FROM entry")
                finally:
                    os._exit(0)
            if not exited_within(pid, seconds=3):
                hung += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert hung == 0, f"{hung} of {FORKS} children hung on a lock SQLite held at the fork"


def exited_within(pid: int, *, seconds: float) -> bool:
    """Whether the child exited in time; one that did not is killed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def test_a_cursor_asked_of_the_connection_itself_holds_the_gate_too(sqlite_file):
    """Django's last_executed_query, which logs every query under DEBUG, asks the SQLite
    connection for a cursor of its own."""
    connection = sqlite_file["default"]
    connection.ensure_connection()
    raw = connection.connection.cursor()
    held = []
    original = fork_gate.hold

    def counting_hold():
        held.append(threading.get_ident())
        return original()

    fork_gate.hold = counting_hold
    try:
        raw.execute("SELECT QUOTE(?)", ("x",))
        assert raw.fetchone() == ("'x'",)
        raw.close()
    finally:
        fork_gate.hold = original
    assert len(held) == 3  # execute, fetch and close
