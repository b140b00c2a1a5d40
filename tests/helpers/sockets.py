"""The conversation websocket through the real ASGI stack, as the tests open it."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from continuity.asgi import application


def session_headers(user, origin: str = "http://localhost") -> list[tuple[bytes, bytes]]:
    """Logs in through the ORM: call it before an async scenario, never inside one (the suite
    runs without DJANGO_ALLOW_ASYNC_UNSAFE, as production does)."""
    headers = [(b"origin", origin.encode()), (b"host", b"localhost")]
    if user is not None:
        client = Client()
        client.force_login(user)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return headers


# A handshake waits on the database thread (session, user, conversation) and on Redis round
# trips (three group_adds, and a new connection's hello): 5 ms unloaded, but up to 1.6 s was
# measured with the suite at nice 19 against two busy loops on two cores. channels' default
# deadline of 1 s then cancelled the consumer mid-handshake and the test failed (or, before
# continuity.live.layer, hung). A disconnect waits for the consumer to leave its
# groups, on Redis the same way. Both get the 5 s that the frames the tests wait for get, and
# return as soon as they are done. (wait() keeps its 1 s: after the consumer closed a socket it
# does not end by itself, and wait() is a grace period before it is cancelled, not a deadline.)
HANDSHAKE_SECONDS = 5


class Communicator(WebsocketCommunicator):
    async def connect(self, timeout: float = HANDSHAKE_SECONDS):
        return await super().connect(timeout)

    async def disconnect(self, code: int = 1000, timeout: float = HANDSHAKE_SECONDS):
        return await super().disconnect(code, timeout)


def communicator(conversation_id: int, headers) -> WebsocketCommunicator:
    return Communicator(application, f"/ws/c/{conversation_id}/", headers=headers)


def connects(conversation_id: int, headers) -> bool:
    async def scenario():
        socket = communicator(conversation_id, headers)
        connected, _ = await socket.connect()
        await socket.disconnect()
        return connected

    return async_to_sync(scenario)()
