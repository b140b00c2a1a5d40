"""The database backend (continuity/database): Django's, with a health check on the socket."""

from __future__ import annotations

import pytest
from django.db import close_old_connections, connection

from continuity import sql
from tests.postgres import another_session, protocol_of
from tests.waiting import wait_for


def backend_pid() -> int:
    (pid,) = sql.row("SELECT pg_backend_pid()")
    return pid


def terminate(pid: int) -> None:
    """End a server process from another session, as a restart ends every one."""
    with another_session() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
def test_a_kept_connection_is_checked_without_asking_the_server():
    backend_pid()
    checked = []
    assert protocol_of(lambda: checked.append(connection.is_usable())) == []
    assert checked == [True]


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_ended_is_replaced_before_the_next_task():
    ended = backend_pid()
    terminate(ended)
    wait_for(lambda: not connection.is_usable(), timeout=10, what="the connection to end")
    close_old_connections()  # as before each task and request
    assert backend_pid() != ended
    assert connection.is_usable()
