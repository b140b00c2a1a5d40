"""A process forked while another of its threads is inside an SQLite write transaction can write
in the child (continuity/database/sqlite): the fork waits for the transaction to end. With
Django's own backend the child waits the whole timeout and fails with 'database is locked', as
a worker's pool process did after a sibling's SIGKILL on `make run`."""

from __future__ import annotations

import os
import threading

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
