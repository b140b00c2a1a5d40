from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from continuity.live.events import publisher_close
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WatchdogProcess, WebProcess, WorkerProcess

# Run only in a pytest process of their own, when its arguments name nothing else: the browser
# tests (see tests/browser/conftest.py) and the multi-host tests (tests/hosts/conftest.py).
OWN_PROCESS = [Path(__file__).resolve().parent / name for name in ("browser", "hosts")]


def own_process_run(config) -> Path | None:
    """The directory of tests this pytest process is for, when it is one of OWN_PROCESS."""
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    for directory in OWN_PROCESS:
        if paths and all(directory in (path, *path.parents) for path in paths):
            return directory
    return None


def pytest_ignore_collect(collection_path, config):
    for directory in OWN_PROCESS:
        if own_process_run(config) != directory and directory in (
            collection_path,
            *collection_path.parents,
        ):
            return True
    return None


# Tests that start processes (workers, the watchdog, daphne) prove how the product runs in
# production, and so do the fault tests: both run on PostgreSQL only.
PROCESS_FIXTURES = {"processes", "worker", "watchdog", "web"}
STARTS_PROCESSES = "starts workers, the watchdog or daphne, which the suite runs on PostgreSQL"
FAULT = "a fault test: the promise is proven on the production database"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks what runs on PostgreSQL only, with the reason (the SQLite lane of `make test`
    leaves those out with `-m "not postgresql"`), and puts what starts processes first."""
    for item in items:
        if item.get_closest_marker("fault"):
            item.add_marker(pytest.mark.postgresql(FAULT))
            item.add_marker(pytest.mark.processes)
        elif PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgresql(STARTS_PROCESSES))
            item.add_marker(pytest.mark.processes)
        for name, why in (("postgresql", "it needs PostgreSQL"), ("exclusive", "it runs alone")):
            marker = item.get_closest_marker(name)
            if marker and not (marker.args or marker.kwargs.get("reason")):
                raise pytest.UsageError(f"{item.nodeid}: say why {why}")
    # Tests that start processes take seconds each, the others milliseconds. Sent first, they
    # spread over pytest-xdist's workers and the quick ones fill in at the end: in file order a
    # long one could start last, while the other workers have nothing left to do. pytest-django
    # sorts after this (its own order: plain database tests, transactional ones, the rest), so
    # they come first within each of those groups, which puts most of them mid-run.
    items.sort(key=lambda item: item.get_closest_marker("processes") is None)


# `make test-fast` runs what starts no process, and sets this: a test that starts one anyway
# (subprocess, a server of its own) fails there, and is to be marked `processes`.
FAST_LANE_ENV = "CONTINUITY_FAST_LANE"


@pytest.fixture(autouse=True)
def no_processes_in_the_fast_lane(request, monkeypatch):
    if os.environ.get(FAST_LANE_ENV) and not request.node.get_closest_marker("processes"):
        message = "this test starts a process: mark it `processes` (make test-fast leaves it out)"

        def refused(*args, **kwargs):
            raise AssertionError(message)

        monkeypatch.setattr(subprocess.Popen, "__init__", refused)


def pytest_report_header(config):
    if own_process_run(config) is None:
        return (
            "browser and multi-host tests left out: each runs in a process of its own, "
            "`pytest tests/browser` and `pytest tests/hosts --ds tests.hosts.settings`"
        )
    return None


@pytest.fixture(scope="session", autouse=True)
def drop_leftover_connections(django_db_setup, django_db_blocker):
    """Sessions left by killed workers and finished threads would block dropping the test DB."""
    yield
    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock():
        connection.close()  # outage tests may have cut it (restarts, terminated sessions)
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete():
    """A transactional test's database is emptied with DELETE, not Django's TRUNCATE of every
    table: on PostgreSQL a TRUNCATE replaces each table's files, about 0.1 s for the few rows a
    test leaves, where a DELETE takes a millisecond. The tables are locked first, as TRUNCATE
    locks them: a write still in flight (a killed worker's last batch) is waited for and
    emptied too, and none lands after. Foreign keys are deferred to the flush's commit, so the
    order of the tables does not matter. (docs/upgrade-checklist.md: Django's flush command
    must still build its statements with `sql_flush`.)"""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        if not tables:
            return []
        names = [self.quote_name(table) for table in tables]
        return [
            f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE",
            *(f"DELETE FROM {name}" for name in names),
        ]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


@pytest.fixture(autouse=True)
def redis_emptied_after():
    """Each test leaves the session's Redis empty and this process's publisher closed, its live
    events sent first (closing it sends what it was handed). Keys and channel groups there are
    named after row ids (drain markers, a conversation's or a user's group), and ids come back:
    SQLite gives the ids of a test's rolled-back rows out again. A publisher that met a stopped
    or restarting Redis pauses live updates for seconds (continuity.live.events), which the
    next test's page, waiting for an event, would take for a lost one."""
    yield
    publisher_close()
    with contextlib.suppress(redis.RedisError):  # a fault test may have left it stopped
        redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2).flushdb()


@pytest.fixture
def user(db):
    return UserFactory()


@pytest.fixture
def other_user(db):
    return UserFactory()


@pytest.fixture
def staff_user(db):
    return UserFactory(is_staff=True)


@pytest.fixture
def conversation(user):
    return ConversationFactory(owner=user)


@pytest.fixture
def owner_client(client, user):
    client.force_login(user)
    return client


@pytest.fixture
def processes(transactional_db):
    """Start real processes with `processes.add(...)`; all are ended after the test. They read
    what the test commits, so the test's database is transactional.

    Killed, not stopped: a test about shutdowns makes its own (`process.stop()`), and a worker's
    warm shutdown takes seconds that no test here would check. `stop_after=True` for a process
    whose children only its own shutdown ends (supervisord's programs run in process groups of
    their own): killed, it would leave them running into the next tests."""
    started = []

    class Registry:
        def add(self, process, *, stop_after: bool = False):
            started.append((process, stop_after))
            return process.start()

    yield Registry()
    for process, stop_after in reversed(started):
        if stop_after:
            process.stop()
        else:
            process.kill_all()


@pytest.fixture
def worker(processes):
    return processes.add(WorkerProcess())


@pytest.fixture
def watchdog(processes):
    return processes.add(WatchdogProcess())


@pytest.fixture
def web(processes):
    return processes.add(WebProcess())
