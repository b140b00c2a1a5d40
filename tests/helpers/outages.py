"""Real database outages for fault tests: refused connections, and crash-like restarts."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from django.db import connection

from devtools import chaos
from tests.helpers.postgres import another_session
from tests.helpers.waiting import wait_for


def terminate_other_connections() -> int:
    """Cut every other session of the test database, as a server restart does."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def sessions_waiting_on_a_lock_ended() -> int:
    """End the sessions of the test database that wait for a lock, as a restart or a failover
    ends a session mid-statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l JOIN pg_stat_activity a "
            "USING (pid) WHERE NOT l.granted AND a.datname = current_database()"
        )
        return cursor.fetchone()[0]


def maintenance_execute(sql: str) -> None:
    """Run a statement from the cluster's maintenance database: a database cannot refuse
    connections while the statement comes through one of its own."""
    with another_session(dbname="postgres") as admin:
        admin.execute(sql)


@contextlib.contextmanager
def database_refuses_connections():
    """Other processes lose their connections and cannot open new ones until the block ends;
    this process keeps its own session, so the test can still look and clean up."""
    name = connection.settings_dict["NAME"]
    connection.ensure_connection()
    maintenance_execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
    try:
        terminate_other_connections()
        yield
    finally:
        maintenance_execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


def postgres_can_restart() -> bool:
    return shutil.which("pg_ctlcluster") is not None and Path("/etc/postgresql").is_dir()


def postgres_restart() -> None:
    """Crash-like restart of the local cluster, then wait until it answers again."""
    connection.close()
    chaos.postgres_restart()

    def answers() -> bool:
        connection.close()
        try:
            connection.ensure_connection()
        except Exception:
            return False
        return True

    wait_for(answers, timeout=60, what="PostgreSQL to accept connections again", every=0.2)
