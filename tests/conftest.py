from __future__ import annotations

import shutil

import pytest
from django.db import connection

from tests.factories import ConversationFactory, UserFactory
from tests.processes import ARTIFACTS, WatchdogProcess, WebProcess, WorkerProcess


def pytest_sessionstart(session):
    shutil.rmtree(ARTIFACTS, ignore_errors=True)


def pytest_collection_modifyitems(items):
    # The browser tests go last: Playwright's sync API leaves an event loop on the main thread,
    # where the websocket tests' async_to_sync cannot run afterwards.
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(scope="session", autouse=True)
def drop_leftover_connections(django_db_setup, django_db_blocker):
    """Sessions left by killed workers and finished threads would block dropping the test DB."""
    yield
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
    """Start real processes with `processes.add(...)`; all are stopped after the test."""
    started = []

    class Registry:
        def add(self, process):
            started.append(process)
            return process.start()

    yield Registry()
    for process in reversed(started):
        process.stop()


@pytest.fixture
def worker(transactional_db, processes):
    return processes.add(WorkerProcess())


@pytest.fixture
def watchdog(transactional_db, processes):
    return processes.add(WatchdogProcess())


@pytest.fixture
def web(transactional_db, processes):
    return processes.add(WebProcess())
