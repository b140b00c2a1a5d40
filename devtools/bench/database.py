"""The run's own database on the configured PostgreSQL server: created fresh, migrated, dropped
after the run.

It is owned by a role of the same name with a CONNECTION LIMIT, and every process of the run
logs in as that role: the crowd of the streaming section takes every connection it can get,
and a test run on the same server must keep some. (PostgreSQL exempts superusers from such
limits, hence a role of its own.)
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connection
from psycopg import sql

COUNT = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s"


@dataclass
class Peak:
    value: int = 0


class BenchDatabase:
    def __init__(self, name: str, *, connection_limit: int) -> None:
        self.name, self.limit = name, connection_limit
        db = connection.settings_dict
        self.admin = {
            "user": db["USER"] or None,
            "password": db["PASSWORD"] or None,
            "host": db["HOST"] or None,
            "port": db["PORT"] or None,
        }
        self.role = name if connection_limit else db["USER"]

    def admin_connection(self) -> psycopg.Connection:
        return psycopg.connect(dbname="postgres", autocommit=True, **self.admin)

    def create(self) -> None:
        """Drop and create the database (and its role), point this process at it, migrate."""
        self.drop()
        name = sql.Identifier(self.name)
        with self.admin_connection() as admin:
            if self.limit:
                limit = sql.Literal(self.limit)
                admin.execute(
                    sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT {}").format(name, limit)
                )
            owner = sql.Identifier(self.role)
            admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(name, owner))
        connection.close()
        for db in (settings.DATABASES["default"], connection.settings_dict):
            db["NAME"] = self.name
            if self.limit:  # the role has no password: for servers that trust local logins
                db["USER"], db["PASSWORD"] = self.role, ""
        call_command("migrate", interactive=False, verbosity=0)

    def drop(self) -> None:
        connection.close()
        with self.admin_connection() as admin:
            # FORCE: sessions of SIGKILLed processes may linger for a moment.
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(self.name))
            )
            if self.limit:
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(self.name)))

    def connections(self) -> int:
        with self.admin_connection() as admin:
            return admin.execute(COUNT, [self.name]).fetchone()[0]

    @contextmanager
    def peak_connections(self, every: float = 0.2):
        """The most connections to the database at any sample while the block runs."""
        peak, done = Peak(), threading.Event()

        def sample() -> None:
            with self.admin_connection() as admin:
                while not done.wait(every):
                    (count,) = admin.execute(COUNT, [self.name]).fetchone()
                    peak.value = max(peak.value, count)

        sampler = threading.Thread(target=sample, name="connection-sampler", daemon=True)
        sampler.start()
        try:
            yield peak
        finally:
            done.set()
            sampler.join()
