"""The database backend (continuity/database): Django's, with a health check on the socket."""

from __future__ import annotations

import select

import psycopg
import pytest
from django.db import close_old_connections, connection

from continuity.database import base
from continuity.store.connection import row
from tests.helpers.postgres import another_session, protocol_of
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.postgresql("Continuity's own backend for PostgreSQL")


def backend_pid() -> int:
    (pid,) = row("SELECT pg_backend_pid()")
    return pid


def terminate(pid: int) -> None:
    """End a server process from another session, as a restart ends every one."""
    with another_session() as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


def sent_by_check() -> tuple[bool, list[tuple[str, str, str]]]:
    checked = []
    protocol = protocol_of(lambda: checked.append(connection.is_usable()))
    return checked[0], protocol


@pytest.mark.django_db
def test_a_connection_in_steady_use_is_checked_without_asking_the_server():
    backend_pid()
    assert connection.is_usable()
    assert sent_by_check() == (True, [])


@pytest.mark.django_db
def test_a_connection_quiet_for_a_while_is_checked_by_the_server():
    backend_pid()
    connection.checked_at -= base.QUIET_SECONDS + 1
    usable, protocol = sent_by_check()
    assert usable
    assert ("F", "Query", '"SELECT 1"') in protocol
    assert sent_by_check() == (True, [])  # and then it is in steady use again


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_ended_is_replaced_before_the_next_task():
    ended = backend_pid()
    assert connection.is_usable()
    terminate(ended)
    wait_for(lambda: not connection.is_usable(), timeout=10, what="the connection to end")
    close_old_connections()  # as before each task and request
    assert backend_pid() != ended
    assert connection.is_usable()


@pytest.mark.django_db
def test_a_connection_left_in_the_middle_of_a_command_is_unusable():
    # As a time limit that fires while a statement runs leaves it: the answer has arrived
    # (the socket is empty again) but was never read.
    backend_pid()
    assert connection.is_usable()
    pgconn = connection.connection.pgconn
    pgconn.send_query(b"SELECT 1")
    while pgconn.is_busy():
        select.select([pgconn.socket], [], [], 5)
        pgconn.consume_input()
    try:
        assert not connection.is_usable()
    finally:
        connection.close()


@pytest.mark.django_db
def test_connections_bound_a_frozen_session_and_a_vanished_peer():
    """The server ends a session left idle in a transaction (a frozen worker holding a
    conversation's lock); TCP keepalives and a send timeout end a connection whose peer
    vanished without a reset, as an outage, instead of after the kernel's two hours."""
    assert row("SHOW idle_in_transaction_session_timeout") == ("5s",)
    parameters = connection.connection.info.get_parameters()
    wanted = {
        "keepalives": "1",
        "keepalives_idle": "5",
        "keepalives_interval": "2",
        "keepalives_count": "3",
        "tcp_user_timeout": "10000",
    }
    assert {key: parameters.get(key) for key in wanted} == wanted


@pytest.mark.django_db(transaction=True)
def test_a_session_idle_in_a_transaction_loses_its_lock_and_ends(conversation):
    """What the timeout does, shortened for the test: the conversation a frozen session
    locked can be locked again, and the frozen session is gone."""
    lock = "SELECT 1 FROM continuity_conversation WHERE id = %s FOR UPDATE NOWAIT"
    frozen = another_session(autocommit=False)
    frozen.execute("SET idle_in_transaction_session_timeout = 200")
    frozen.execute(lock, [conversation.pk])

    def lockable() -> bool:
        with another_session(autocommit=False) as other:
            try:
                other.execute(lock, [conversation.pk])
            except psycopg.errors.LockNotAvailable:
                return False
            return True

    wait_for(lockable, timeout=10, what="the frozen session's lock to be released")
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
        frozen.execute("SELECT 1")
