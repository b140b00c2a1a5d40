"""Live updates to browsers through the channel layer.

Group messages are at-most-once: everything published here is already in the database, and a
reconnecting browser catches up from there. A failed publish is therefore logged and dropped,
never raised, and never allowed to stall the reply it reports on.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
import time

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

logger = logging.getLogger(__name__)

REDIS_LAYER = "channels_redis.core.RedisChannelLayer"
# Only what a stalled or unreachable Redis raises, caught on the publisher's own thread.
PUBLISH_ERRORS = (redis.RedisError, OSError, TimeoutError, concurrent.futures.TimeoutError)


def conversation_group(conversation_id: int) -> str:
    return f"conversation.{conversation_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def session_group(session_key: str) -> str:
    return f"session.{session_key}"


def publish(conversation_id: int, event: dict) -> None:
    group_publish(conversation_group(conversation_id), event)


def group_publish(group: str, event: dict) -> None:
    if settings.CHANNEL_LAYERS["default"]["BACKEND"] != REDIS_LAYER:
        async_to_sync(get_channel_layer().group_send)(group, event)
        return
    publisher().send(group, event)


class Publisher:
    """One event loop on a daemon thread with its own channel layer, so every publish of this
    process reuses the same Redis connections (a fresh `async_to_sync` per publish opened a new
    connection each time).

    `send` never waits: it hands the event to the loop, where one task sends the events in the
    order given (so a page sees chunks in order). A reply or an accept therefore never waits on
    Redis, not even for a round trip. Sockets time out quickly; after a failure events are
    dropped for a while, and so are events beyond a bounded backlog (Redis too slow)."""

    BACKLOG = 10_000

    def __init__(self) -> None:
        from channels_redis.core import RedisChannelLayer

        config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
        timeout = settings.CONTINUITY_PUBLISH_TIMEOUT_SECONDS
        hosts = [
            {**host, "socket_timeout": timeout, "socket_connect_timeout": timeout}
            for host in config["hosts"]
        ]
        self.layer = RedisChannelLayer(**{**config, "hosts": hosts})
        self.timeout = timeout
        self.paused_until = 0.0
        self.loop = asyncio.new_event_loop()
        self.backlog: asyncio.Queue[tuple[str, dict]] = asyncio.Queue(self.BACKLOG)
        threading.Thread(target=self.run, name="continuity-publisher", daemon=True).start()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        drain = self.loop.create_task(self.drain())
        self.loop.run_forever()
        drain.cancel()
        self.loop.run_until_complete(asyncio.gather(drain, return_exceptions=True))
        # Closed here, on its own thread: left to the garbage collector, channels-redis's close
        # hook would try to run the loop on whatever thread collects it, maybe inside another.
        self.loop.close()

    def send(self, group: str, event: dict) -> None:
        if time.monotonic() < self.paused_until:
            return
        self.loop.call_soon_threadsafe(self.enqueue, group, event)

    def enqueue(self, group: str, event: dict) -> None:
        try:
            self.backlog.put_nowait((group, event))
        except asyncio.QueueFull:
            logger.warning("Live update %s to %s dropped: backlog full", event["type"], group)

    async def drain(self) -> None:
        while True:
            group, event = await self.backlog.get()
            if time.monotonic() < self.paused_until:
                continue
            try:
                # A little over the socket timeouts, which end the send first in most cases.
                async with asyncio.timeout(self.timeout * 2):
                    await self.layer.group_send(group, event)
            except PUBLISH_ERRORS:
                self.paused_until = time.monotonic() + settings.CONTINUITY_PUBLISH_PAUSE_SECONDS
                logger.warning(
                    "Live update %s to %s not sent; live updates paused for %gs",
                    event["type"],
                    group,
                    settings.CONTINUITY_PUBLISH_PAUSE_SECONDS,
                    exc_info=True,
                )

    def flush(self, timeout: float) -> bool:
        """Wait until every event handed over so far was sent or dropped (tests, shutdown)."""

        async def empty() -> None:
            while self.backlog.qsize():
                await asyncio.sleep(0.005)

        try:
            asyncio.run_coroutine_threadsafe(empty(), self.loop).result(timeout=timeout)
            return True
        except concurrent.futures.TimeoutError:
            return False

    def close(self) -> None:
        async def shut() -> None:
            await self.layer.close_pools()

        with contextlib.suppress(*PUBLISH_ERRORS):
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=self.timeout)
        self.loop.call_soon_threadsafe(self.loop.stop)


_publisher_lock = threading.Lock()
_publisher: tuple[int, Publisher] | None = None


def publisher() -> Publisher:
    """This process's publisher. Keyed by pid: a prefork child inherits the parent's object but
    not its loop thread, and must not share the parent's sockets."""
    global _publisher
    with _publisher_lock:
        if _publisher is None or _publisher[0] != os.getpid():
            _publisher = (os.getpid(), Publisher())
        return _publisher[1]


def publisher_flush(timeout: float = 1.0) -> None:
    """Before this process exits: let the events already handed over go out (bounded)."""
    with _publisher_lock:
        current = _publisher
    if current is not None and current[0] == os.getpid():
        current[1].flush(timeout)


def publisher_close() -> None:
    """Drop this process's publisher (tests that point the channel layer elsewhere)."""
    global _publisher
    with _publisher_lock:
        current, _publisher = _publisher, None
    if current is not None and current[0] == os.getpid():
        current[1].close()


def publish_session_ended(*, user_id: int | None = None, session_key: str | None = None) -> None:
    """Close the sockets of one session (logout) or of every session of a user (password
    change, deactivation). A missed event is caught by the check the socket makes on its next
    sync."""
    if user_id is not None:
        group_publish(user_group(user_id), {"type": "session.ended"})
    if session_key:
        group_publish(session_group(session_key), {"type": "session.ended"})


def publish_message_changed(*, conversation_id: int, message_id: int) -> None:
    publish(conversation_id, {"type": "message.changed", "message_id": message_id})


def publish_conversation_changed(*, conversation_id: int) -> None:
    publish(conversation_id, {"type": "conversation.changed"})


def publish_conversation_deleted(*, conversation_id: int) -> None:
    publish(conversation_id, {"type": "conversation.deleted"})


def publish_reply_chunk(
    *, conversation_id: int, message_id: int, run_id: int, seq: int, text: str
) -> None:
    publish(
        conversation_id,
        {
            "type": "reply.chunk",
            "message_id": message_id,
            "run_id": run_id,
            "seq": seq,
            "text": text,
        },
    )


BRANCH_CHANGE_MAX_IDS = 2000


def publish_branch_changed(*, conversation_id: int, message_ids: list[int]) -> None:
    """Messages were hidden or shown by a new version or a switch of versions. A change too
    large for one event asks pages to reload instead (message_ids None)."""
    ids = message_ids if len(message_ids) <= BRANCH_CHANGE_MAX_IDS else None
    publish(conversation_id, {"type": "branch.changed", "message_ids": ids})


atexit.register(publisher_flush)
