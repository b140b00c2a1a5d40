"""The drain queue: a conversation's drain sent to the broker once per waiting turn, its marker
in Redis, its receipt, and the watchdog's look at what is still queued. A message accepted
(`inbox`) or given back asks for a drain here; the stored waiting message, not the broker's, is
the real outbox."""

from __future__ import annotations

import base64
import json
import logging

import redis
from django.conf import settings
from django.db import DatabaseError, InterfaceError, transaction
from kombu.exceptions import OperationalError

from continuity.celery import app as celery_app

from .. import store
from ..store import conversations
from .heartbeats import key_delete
from .redis_connection import redis_client

logger = logging.getLogger(__name__)
# Sent by name, so the pipeline never imports the worker's Celery adapter (worker/tasks.py); the
# name stays whatever module holds the task, so drains queued across a deploy are run.
DRAIN_TASK = "continuity.drain_conversation"
SEND_ERRORS = (redis.RedisError, OperationalError, OSError)

DRAIN_SEQUENCE_KEY = "continuity:drains:sent"
DRAIN_RECEIVED_KEY = "continuity:drains:received"
# Number the next drain (KEYS[3]) and claim the conversation's marker for it, unless a drain
# newer than every received one holds it (that one is still in the queue): its number, or 0.
# An older marker is orphaned and is replaced. One round trip per accept.
CLAIM = """
local sequence = redis.call('INCR', KEYS[3])
local marker = redis.call('GET', KEYS[1])
local received = tonumber(redis.call('GET', KEYS[2]) or '0')
if marker and tonumber(marker) > received then return 0 end
redis.call('SET', KEYS[1], sequence, 'EX', ARGV[1])
return sequence
"""
# On receipt of drain ARGV[1]: clear the conversation's marker if it is this drain's (an older
# duplicate must not clear the marker of a newer drain still in the queue), and raise the
# "received" high-water mark, never lower it (receipts arrive slightly out of order).
RECEIVED = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
local received = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) > received then redis.call('SET', KEYS[2], ARGV[1]) end
"""


# Clear the conversation's marker if it still holds drain ARGV[1], found to be in no queue.
ORPHAN_CLEAR = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# How long a queue the watchdog reads to tell a waiting drain from an orphaned marker; past
# that, drains are being received all the time, and the "received" mark finds orphans.
QUEUE_READ_LIMIT = 1000


def drain_marker_key(conversation_id: int) -> str:
    return f"continuity:conversation:{conversation_id}:drain-queued"


def conversation_enqueue(*, conversation_id: int, stamped: bool = False) -> None:
    """Ask a worker to drain the conversation once the current transaction commits.
    `stamped`: the transaction set the conversation's `enqueued_at` itself (see `drain_send`).

    The stored waiting message, not this broker message, is the real outbox: if the send is lost
    (process death right after commit, Redis down or flushed), the watchdog sends it again.
    """
    transaction.on_commit(lambda: drain_send(conversation_id=conversation_id, stamped=stamped))


def drain_send(*, conversation_id: int, stamped: bool = False) -> None:
    """Send a drain task unless one for this conversation is already waiting in the queue.

    One waiting drain per conversation keeps the queue fair: a drain answers messages for a slice
    and then sends the next drain to the back of the queue, so conversations take turns. The
    marker lives in the broker's Redis, so a Redis that loses its queue loses the markers with
    it; it holds the drain's sequence number, and a worker clears it when it receives the task.

    The conversation's `enqueued_at` (the watchdog's clock for a lost drain) is set once the
    drain is sent, unless the transaction that asked for it set it already (`stamped`: an
    accept sets it with its message, one transaction fewer); a send that fails clears it, so
    the watchdog's next sweep sends the drain again.
    """
    marker = drain_marker_key(conversation_id)
    ttl = int(settings.CONTINUITY_DRAIN_MARKER_SECONDS)
    claimed, sent, failed = True, False, False  # claimed unless Redis answers that it is held
    try:
        keys = (marker, DRAIN_RECEIVED_KEY, DRAIN_SEQUENCE_KEY)
        sequence = redis_client().eval(CLAIM, len(keys), *keys, ttl)
        claimed = bool(sequence)
        if claimed:
            # The limits are read now, from this process's settings: Celery would otherwise
            # put the values it cached at its first send into every message. A drain has no
            # result (`ignore_result`: the result backend is not told of the send).
            celery_app.send_task(
                DRAIN_TASK,
                (conversation_id,),
                {"sequence": sequence},
                soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
                time_limit=settings.CELERY_TASK_TIME_LIMIT,
                ignore_result=True,
            )
            sent = True
            if not stamped:
                drain_sent_at(conversation_id=conversation_id)
    except SEND_ERRORS:
        # Only broker and network errors: a soft time limit raised meanwhile must reach the task.
        logger.warning(
            "Enqueue of conversation %s failed; the watchdog will retry",
            conversation_id,
            exc_info=True,
        )
        failed = True
    finally:
        if claimed and not sent:
            # A marker without its task would hold off every enqueue until it expires.
            key_delete(marker)
    if failed:
        # Once the marker is gone: an accept that it refused committed before this write, so
        # the watchdog's next sweep sends the drain for that message too.
        drain_sent_at(conversation_id=conversation_id, unsent=True)


def drain_sent_at(*, conversation_id: int, unsent: bool = False) -> None:
    """When a drain was last sent (`unsent`: none, a send failed): the watchdog's clock for
    "lost". Best effort: a stale time costs a spare re-send or a later one, so its commit does
    not wait for the disk."""
    try:
        with transaction.atomic():
            store.round_trip(
                *store.unflushed_commit(),
                conversations.drain_sent(conversation_id, unsent=unsent),
                commit=True,
            )
    except (DatabaseError, InterfaceError):
        logger.warning("Send time of conversation %s not recorded", conversation_id)


def drain_received(*, conversation_id: int, sequence: int) -> None:
    """A worker received drain `sequence` (it left the queue): the next enqueue of its
    conversation may send another one."""
    try:
        redis_client().eval(
            RECEIVED, 2, drain_marker_key(conversation_id), DRAIN_RECEIVED_KEY, sequence
        )
    except redis.RedisError:
        logger.warning("Receipt of drain %s not recorded: Redis unavailable", sequence)


def drains_waiting(conversation_ids: list[int]) -> set[int]:
    """The conversations among these that have a drain waiting in the queue.

    The queue is first in, first out: a marker older than a drain that a worker has already
    received belongs to a drain that will never arrive (popped by a worker that died before it
    could note the receipt, or lost with it), so it does not count. In a quiet system no later
    drain is received: there a marker whose drain is not in the queue is an orphan too, and is
    cleared, so that the watchdog's send may take its place.
    """
    if not conversation_ids:
        return set()
    keys = [drain_marker_key(pk) for pk in conversation_ids]
    try:
        *markers, received = redis_client().mget([*keys, DRAIN_RECEIVED_KEY])
        received_up_to = int(received or 0)
        newer = {
            pk: int(marker)
            for pk, marker in zip(conversation_ids, markers, strict=True)
            if marker is not None and int(marker) > received_up_to
        }
        queued = drains_queued() if newer else None
        if queued is None:
            return set(newer)
        for pk in [pk for pk, sequence in newer.items() if sequence not in queued]:
            redis_client().eval(ORPHAN_CLEAR, 1, drain_marker_key(pk), newer.pop(pk))
        return set(newer)
    except redis.RedisError:
        return set()


def drains_queued() -> set[int] | None:
    """The sequence numbers of the drains in the broker's queue; None past QUEUE_READ_LIMIT."""
    client, queue = redis_client(), settings.CELERY_TASK_DEFAULT_QUEUE
    if client.llen(queue) > QUEUE_READ_LIMIT:
        return None
    sequences = set()
    try:
        for raw in client.lrange(queue, 0, QUEUE_READ_LIMIT):
            envelope = json.loads(raw)
            if envelope["headers"].get("task") == DRAIN_TASK:
                _, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
                sequences.add(kwargs.get("sequence"))
    except (ValueError, KeyError, TypeError):
        return None  # a message of a form not known here: trust the markers
    return sequences
