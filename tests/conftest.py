from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.db import connection

from tests.factories import ConversationFactory, UserFactory
from tests.processes import ARTIFACTS, WatchdogProcess, WebProcess, WorkerProcess

BROWSER_TESTS = Path(__file__).resolve().parent / "browser"


def browser_run(config) -> bool:
    """Browser tests run only in a pytest process of their own (see tests/browser/conftest.py):
    `pytest tests/browser`. Any other selection leaves them out, whatever the order."""
    paths = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(BROWSER_TESTS in (path, *path.parents) for path in paths)


def pytest_ignore_collect(collection_path, config):
    if not browser_run(config) and BROWSER_TESTS in (collection_path, *collection_path.parents):
        return True
    return None


def pytest_report_header(config):
    if not browser_run(config):
        return "browser tests left out: they run in their own process, `pytest tests/browser`"
    return None


def pytest_sessionstart(session):
    if not browser_run(session.config):  # the browser run follows the main one: keep its logs
        shutil.rmtree(ARTIFACTS, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def drop_leftover_connections(django_db_setup, django_db_blocker):
    """Sessions left by killed workers and finished threads would block dropping the test DB."""
    yield
    with django_db_blocker.unblock():
        connection.close()  # outage tests may have cut it (restarts, terminated sessions)
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


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
def processes():
    """Start real processes with `processes.add(...)`; all are ended after the test.

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
def worker(transactional_db, processes):
    return processes.add(WorkerProcess())


@pytest.fixture
def watchdog(transactional_db, processes):
    return processes.add(WatchdogProcess())


@pytest.fixture
def web(transactional_db, processes):
    return processes.add(WebProcess())
