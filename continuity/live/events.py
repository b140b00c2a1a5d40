"""Live updates to browsers through the channel layer.

Group messages are at-most-once: everything published here is already in the database, and a
reconnecting browser catches up from there. A failed publish is therefore logged and dropped,
never raised, and never allowed to stall the reply it reports on.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import threading
import time

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

logger = logging.getLogger(__name__)

REDIS_LAYER = "continuity.live.layer.ChannelLayer"
# Only what a stalled or unreachable Redis raises, caught on the publisher's own thread.
PUBLISH_ERRORS = (redis.RedisError, OSError)


def conversation_group(conversation_id: int) -> str:
    return f"conversation.{conversation_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def session_group(session_key: str) -> str:
    return f"session.{session_key}"


def publish(conversation_id: int, event: dict) -> None:
    group_publish(conversation_group(conversation_id), event)


def group_publish(group: str, event: dict) -> None:
    try:
        if settings.CHANNEL_LAYERS["default"]["BACKEND"] != REDIS_LAYER:
            async_to_sync(get_channel_layer().group_send)(group, event)
            return
        publisher().send(group, event)
    except Exception:  # published after a commit: raising would pass for a failed transaction
        logger.exception("Live update %s to %s not sent", event["type"], group)


# Deliver one event to the channels of a group, as channels-redis delivers it: each channel's
# sorted set drops its expired messages, takes the message unless it is full, and expires with
# it. KEYS: the channels' keys; ARGV: one message per key, one capacity per key, the expiry.
# The number of channels that were full.
#
# The score (when the message was sent, which orders a channel and expires what is too old) is
# Redis's own clock, not the sending host's: a worker whose clock runs behind would have its
# events trimmed as expired by everyone else's, and one that runs ahead would trim theirs. In a
# channel it is strictly after the newest message already there, so events keep the order in
# which Redis took them, whichever hosts sent them.
DELIVER = """
local count = #KEYS
local expiry = tonumber(ARGV[2 * count + 1])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local full = 0
for i = 1, count do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, now - expiry)
    if redis.call('ZCARD', KEYS[i]) < tonumber(ARGV[count + i]) then
        local score = now
        local newest = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
        if newest[2] and tonumber(newest[2]) >= score then
            score = tonumber(newest[2]) + 0.000001
        end
        redis.call('ZADD', KEYS[i], score, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        full = full + 1
    end
end
return full
"""


class Publisher:
    """One thread per process sends this process's live updates over one plain Redis
    connection, in channels-redis's own format: its layer object names the keys and serializes
    the messages, so pages receive them through the channel layer as usual.

    Events are sent in batches: an event waits CONTINUITY_PUBLISH_LINGER_SECONDS for those that
    follow it, and those queued while a batch was out go together in the next, one round trip
    to find the channels of their groups and, when any has one, one to deliver them, in the
    order given (so a page sees chunks in order). Through the layer's asyncio API each event
    cost two awaited round trips and a connection-pool checkout: about 0.45 ms of CPU, a fifth
    of everything a message costs at zero think time; one at a time, 0.14 ms and a thread
    switch (docs/benchmarks.md).

    `send` never waits, not even for a round trip: a reply or an accept never waits on Redis.
    Sockets time out quickly; after a failure events are dropped for a while, and so are events
    beyond a bounded backlog (Redis too slow)."""

    BACKLOG = 10_000
    BATCH = 200
    _STOP = object()

    def __init__(self) -> None:
        from .layer import ChannelLayer

        config = settings.CHANNEL_LAYERS["default"]["CONFIG"]
        if len(config["hosts"]) != 1:
            raise ImproperlyConfigured("Live updates need a channel layer with exactly one host.")
        self.layer = ChannelLayer(**config)
        self.timeout = settings.CONTINUITY_PUBLISH_TIMEOUT_SECONDS
        self.redis = redis_of(config["hosts"][0], timeout=self.timeout)
        self.paused_until = 0.0
        self.backlog: queue.Queue = queue.Queue(self.BACKLOG)
        self.thread = threading.Thread(target=self.run, name="continuity-publisher", daemon=True)
        self.thread.start()

    def send(self, group: str, event: dict) -> None:
        if time.monotonic() < self.paused_until:
            return
        try:
            self.backlog.put_nowait((group, event))
        except queue.Full:
            logger.warning("Live update %s to %s dropped: backlog full", event["type"], group)

    def run(self) -> None:
        while True:
            batch = [self.backlog.get()]
            # What else happens meanwhile (the rest of a reply's events) goes in the same batch.
            time.sleep(settings.CONTINUITY_PUBLISH_LINGER_SECONDS)
            while len(batch) < self.BATCH and not self.backlog.empty():
                batch.append(self.backlog.get_nowait())
            stop = self._STOP in batch
            events = [each for each in batch if each is not self._STOP]
            try:
                if events and time.monotonic() >= self.paused_until:
                    self.deliver(events)
            except PUBLISH_ERRORS:
                self.paused_until = time.monotonic() + settings.CONTINUITY_PUBLISH_PAUSE_SECONDS
                logger.warning(
                    "%d live update(s) not sent; live updates paused for %gs",
                    len(events),
                    settings.CONTINUITY_PUBLISH_PAUSE_SECONDS,
                    exc_info=True,
                )
            except Exception:  # an event that cannot be sent must not end the thread
                logger.exception("%d live update(s) not sent", len(events))
            finally:
                for _ in batch:
                    self.backlog.task_done()
            if stop:
                self.redis.close()
                return

    def deliver(self, events: list[tuple[str, dict]]) -> None:
        events = without_superseded(events)
        layer = self.layer
        groups = list(dict.fromkeys(group for group, _ in events))
        now = time.time()
        lookup = self.redis.pipeline(transaction=False)
        for group in groups:
            key = layer._group_key(group)
            lookup.zremrangebyscore(key, 0, int(now) - layer.group_expiry)
            lookup.zrange(key, 0, -1)
        found = lookup.execute()[1::2]
        members = {
            group: [name.decode() for name in names]
            for group, names in zip(groups, found, strict=True)
        }
        delivery = self.redis.pipeline(transaction=False)
        for group, event in events:
            if not members[group]:
                continue
            try:
                # With one host, every channel's key is on connection 0.
                _, messages, capacities = layer._map_channel_keys_to_connection(
                    members[group], event
                )
            except Exception:  # one that cannot be serialized must not cost the others
                logger.exception("Live update %s to %s not sent", event["type"], group)
                continue
            keys = list(messages)
            delivery.eval(
                DELIVER,
                len(keys),
                *keys,
                *messages.values(),
                *(capacities[key] for key in keys),
                layer.expiry,
            )
        if len(delivery):
            delivery.execute()

    def flush(self, timeout: float) -> bool:
        """Wait until every event handed over so far was sent or dropped (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self.backlog.unfinished_tasks:
            if time.monotonic() > deadline or not self.thread.is_alive():
                return False
            time.sleep(0.005)
        return True

    def close(self) -> None:
        with contextlib.suppress(queue.Full):
            self.backlog.put(self._STOP, timeout=self.timeout)
        self.thread.join(timeout=self.timeout * 2)


def without_superseded(events: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """A batch's events less those a later one makes redundant: a page renders a changed
    message from the database, after every event of the batch was committed, so the earlier
    changes of that message and its chunks before the last change add nothing (a quick reply's
    start, text and end become one rendering)."""
    last_change = {
        (group, event.get("message_id")): index
        for index, (group, event) in enumerate(events)
        if event["type"] == "message.changed"
    }
    return [
        (group, event)
        for index, (group, event) in enumerate(events)
        if event["type"] not in ("message.changed", "reply.chunk")
        or last_change.get((group, event.get("message_id")), index) <= index
    ]


# The keys of a channel-layer host that are the layer's own, or say where Redis is.
LAYER_KEYS = ("address", "max_connections", "sentinels", "master_name", "sentinel_kwargs")


def redis_of(host: dict, *, timeout: float, retries: bool = False) -> redis.Redis:
    """A blocking client for a channel-layer host: its `address`, the primary its `sentinels`
    name (asked again after a failover), or its connection keywords. Its sockets give up after
    `timeout`; without `retries` a failed command is not tried again (a live update is not
    worth waiting for)."""
    options = {key: value for key, value in host.items() if key not in LAYER_KEYS}
    options.update(socket_timeout=timeout, socket_connect_timeout=timeout)
    # With `retries`, redis-py's own default for a client (10 tries, 10 ms to 1 s apart): a
    # Sentinel's master_for would give its connections none at all.
    options["retry"] = (
        Retry(ExponentialWithJitterBackoff(base=0.01, cap=1), 10) if retries else None
    )
    if "sentinels" in host:
        sentinels = Sentinel(host["sentinels"], sentinel_kwargs=host.get("sentinel_kwargs"))
        return sentinels.master_for(host["master_name"], **options)
    if "address" in host:
        return redis.Redis.from_url(host["address"], **options)
    return redis.Redis(**options)


def redis_configured(*, timeout: float, retries: bool = False) -> redis.Redis:
    """A blocking client of the Redis this deployment uses (REDIS_URL, or REDIS_SENTINELS)."""
    return redis_of(settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0], timeout=timeout,
                    retries=retries)  # fmt: skip


_publisher_lock = threading.Lock()
_publisher: tuple[int, Publisher] | None = None


def publisher() -> Publisher:
    """This process's publisher. Keyed by pid: a prefork child inherits the parent's object but
    not its thread, and must not share the parent's sockets. One whose thread died is
    replaced."""
    global _publisher
    with _publisher_lock:
        stale = _publisher is None or _publisher[0] != os.getpid()
        if stale or not _publisher[1].thread.is_alive():
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


def publish_conversation_changed(*, conversation_id: int, owner_id: int | None = None) -> None:
    """The conversation's state changed: its pages show the status again. With `owner_id`, a
    change the sidebar shows too (its title, a pause), for every page of its owner."""
    publish(conversation_id, {"type": "conversation.changed"})
    if owner_id is not None:
        publish_conversations_changed(owner_id=owner_id)


def publish_conversations_changed(*, owner_id: int) -> None:
    """A conversation of this person was started, titled, renamed, archived, paused, resumed or
    deleted: their open pages show the sidebar again."""
    group_publish(user_group(owner_id), {"type": "conversations.changed"})


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
