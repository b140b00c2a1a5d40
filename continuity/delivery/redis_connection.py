"""The pipeline's Redis client: drain markers, heartbeat keys, outage notes, model servers'
health and slots. One per process, with redis-py's retries (a failover's reconnect), and with
REDIS_SENTINELS the primary they name."""

from __future__ import annotations

import os

import redis

from ..live.events import redis_configured

_clients: dict[int, redis.Redis] = {}


def redis_client() -> redis.Redis:
    """This process's client, made in it. A pool process forked from a worker never uses its
    parent's: redis-py rebuilds an inherited connection pool in the child under the pool's lock,
    and a lock that a thread of the parent held at the fork (its heartbeats use the client all
    the time) stays held in the child for ever. The child's first command then hung, with its
    attempt begun, and the attempt with it (found by a fresh-clone run: an answer never came
    after a SIGKILL's replacement process took the message)."""
    pid = os.getpid()
    if (client := _clients.get(pid)) is None:
        # No lock of our own either: two threads that race here make a client each (it
        # connects only when used), and one is kept.
        client = _clients.setdefault(pid, redis_configured(timeout=2, retries=True))
    return client
