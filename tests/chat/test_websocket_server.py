"""The conversation websocket through a real daphne process and the Redis channel layer."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from chat.consumers import TOO_MANY_SOCKETS
from continuity.delivery.inbox import message_accept
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WebProcess
from tests.helpers.redis_server import session_redis_server
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def open_socket(web, path: str, cookie: str = "", origin: str | None = None):
    return connect(
        f"ws://127.0.0.1:{web.port}{path}",
        additional_headers={"Cookie": cookie, "Origin": origin or web.url},
        open_timeout=10,
    )


def test_an_idle_socket_stays_open_and_answers_a_sync(web):
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    message = message_accept(conversation=conversation, text="Still there?", client_id=uuid.uuid4())

    with open_socket(web, f"/ws/c/{conversation.pk}/", session_cookie(owner)) as socket:
        # Nothing is published to this conversation: any frame or close within 20 s is a fault.
        with pytest.raises(TimeoutError):
            socket.recv(timeout=20)
        socket.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
        exchanges = json.loads(socket.recv(timeout=10))

    assert exchanges["type"] == "exchanges" and exchanges["up_to"] == message.pk
    assert "Traceback" not in web.log() and "Timeout reading" not in web.log()


def test_an_unknown_websocket_path_is_refused_without_a_traceback(web):
    with pytest.raises(InvalidStatus) as refused:
        open_socket(web, "/ws/nope/", session_cookie(UserFactory()))
    assert refused.value.response.status_code == 403
    assert "Traceback" not in web.log()


def test_a_page_from_another_port_of_the_same_host_cannot_open_a_socket(web):
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    path = f"/ws/c/{conversation.pk}/"
    with pytest.raises(InvalidStatus) as refused:
        open_socket(web, path, session_cookie(owner), origin="http://127.0.0.1:9999")
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus):
        open_socket(web, path, session_cookie(owner), origin=f"https://127.0.0.1:{web.port}")
    with open_socket(web, path, session_cookie(owner)) as socket:
        socket.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
        assert json.loads(socket.recv(timeout=10))["type"] == "exchanges"


def test_an_oversized_or_deeply_nested_frame_gets_an_error_and_the_socket_lives(web):
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    with open_socket(web, f"/ws/c/{conversation.pk}/", session_cookie(owner)) as socket:
        socket.send("[" * 100_000)
        deep = json.loads(socket.recv(timeout=10))
        socket.send(json.dumps({"type": "sync", "after": 0, "waiting": [1] * 50_000}))
        big = json.loads(socket.recv(timeout=10))
        socket.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
        after = json.loads(socket.recv(timeout=10))
    assert deep["type"] == big["type"] == "error"
    assert "too large" in big["error"] or "too deep" in big["error"]
    assert after["type"] == "exchanges"
    assert "Traceback" not in web.log() and "RecursionError" not in web.log()


def test_logging_out_closes_the_pages_socket(web):
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    browser = Client()
    browser.force_login(owner)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    with open_socket(web, f"/ws/c/{conversation.pk}/", cookie) as socket:
        socket.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
        socket.recv(timeout=10)  # the exchanges, with the status
        browser.post("/accounts/logout/")
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                socket.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


def test_the_web_process_pools_its_database_connections(processes):
    """A burst of requests, each on a thread of daphne's, shares a few pooled connections
    instead of each thread keeping one of its own; and the pool stays daphne's: importing the
    ASGI module does not hand it on to the workers that a process starts."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import continuity.asgi  # noqa: F401  (what daphne imports)
    from tests.helpers.processes import WebProcess

    assert "DATABASE_POOL_SIZE" not in os.environ
    # Its sessions carry a name of their own (libpq reads PGAPPNAME): the count below must not
    # include a session another test's process or thread is still closing.
    web = processes.add(WebProcess(DATABASE_POOL_SIZE="3", PGAPPNAME=POOLED_WEB))
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    cookie = session_cookie(owner)

    def page(_) -> int:
        request = urllib.request.Request(f"{web.url}/c/{conversation.pk}/")
        request.add_header("Cookie", cookie)
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status

    with ThreadPoolExecutor(max_workers=30) as pool:
        statuses = list(pool.map(page, range(60)))
    assert statuses == [200] * 60
    assert 1 <= database_sessions(POOLED_WEB) <= 3


POOLED_WEB = "continuity-test-pooled-web"


def database_sessions(application_name: str) -> int:
    """Sessions on the test database opened by processes that gave this application name."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [application_name],
        )
        return cursor.fetchone()[0]


def test_a_redis_outage_closes_sockets_to_come_back_and_answers_no_handshake_with_an_error(web):
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    path, cookie = f"/ws/c/{conversation.pk}/", session_cookie(owner)
    redis_server = session_redis_server()
    try:
        with open_socket(web, path, cookie) as socket:
            redis_server.stop()
            with pytest.raises(ConnectionClosed) as closed:
                socket.recv(timeout=20)
        assert closed.value.rcvd.code == 4503  # try again later, not 1011: nothing failed here

        # While it is away, a page's reconnect is told the same, never answered HTTP 500.
        with pytest.raises(ConnectionClosed) as refused, open_socket(web, path, cookie) as again:
            again.recv(timeout=20)
        assert refused.value.rcvd.code == 4503
    finally:
        redis_server.start()

    def synced() -> bool:  # as the page reconnects: a pooled connection may fail once more
        try:
            with open_socket(web, path, cookie) as socket:
                socket.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
                return json.loads(socket.recv(timeout=10))["type"] == "exchanges"
        except ConnectionClosed as closed:
            assert closed.rcvd.code == 4503
            return False

    wait_for(synced, timeout=20, what="a socket that catches up once Redis is back")
    assert " 500 " not in web.log() and "Traceback" not in web.log()


@pytest.mark.processes
def test_a_person_past_the_socket_cap_is_refused_with_a_code_the_page_knows(processes):
    web = processes.add(WebProcess(CONTINUITY_SOCKETS_PER_USER="3"))
    owner, other = UserFactory(), UserFactory()
    path = f"/ws/c/{ConversationFactory(owner=owner).pk}/"
    cookie = session_cookie(owner)
    sockets = [open_socket(web, path, cookie) for _ in range(3)]
    for socket in sockets:  # each is live
        socket.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
        assert json.loads(socket.recv(timeout=10))["type"] == "exchanges"

    with open_socket(web, path, cookie) as fourth, pytest.raises(ConnectionClosed) as closed:
        fourth.recv(timeout=10)
    assert closed.value.rcvd.code == TOO_MANY_SOCKETS
    with open_socket(
        web, f"/ws/c/{ConversationFactory(owner=other).pk}/", session_cookie(other)
    ) as theirs:
        theirs.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
        assert json.loads(theirs.recv(timeout=10))["type"] == "exchanges"  # not theirs to pay

    sockets.pop().close()  # a tab closed: a new one may open

    def fourth_lives() -> bool:
        with open_socket(web, path, cookie) as again:
            again.send(json.dumps({"type": "sync", "after": 0, "waiting": []}))
            try:
                return json.loads(again.recv(timeout=10))["type"] == "exchanges"
            except ConnectionClosed:
                return False

    wait_for(fourth_lives, timeout=10, what="a socket let in after one closed")
    for socket in sockets:
        socket.close()
    assert "Traceback" not in web.log()
