from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from continuity.models import ReplyChunk, Run

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str | Callable[[], str],
    every: float = 0.05,
) -> T:
    """Poll until `condition()` is truthy and return it; fail with `what` at the deadline (a
    callable: said as it is then, a process's log for one)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"Timed out after {timeout:g}s waiting for {said}")
        time.sleep(every)


def wait_streaming(message) -> Run:
    """The live attempt of `message`, once part of its reply is stored (so it is mid-reply)."""
    chunk = wait_for(
        lambda: (
            ReplyChunk.objects.filter(message=message, run__state="running")
            .select_related("run")
            .first()
        ),
        timeout=30,
        what=f"message {message.pk} to be mid-reply",
        every=0.02,
    )
    return chunk.run


def lock_waiters() -> int:
    """Database sessions of the test database that are waiting for a row or table lock.

    PostgreSQL reads pg_stat_activity once per transaction and keeps that snapshot: a caller
    inside a transaction (a test holding the lock others wait for) would never see a session
    that connected after its first look. The snapshot is dropped before each count."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
            "WHERE NOT l.granted AND a.datname = current_database()"
        )
        return cursor.fetchone()[0]
