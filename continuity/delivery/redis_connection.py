"""The pipeline's Redis client: drain markers, heartbeat keys, outage notes, model servers'
health and slots. One per process, with redis-py's retries (a failover's reconnect), and with
REDIS_SENTINELS the primary they name."""

from __future__ import annotations

import functools

import redis

from ..live.events import redis_configured


@functools.cache
def redis_client() -> redis.Redis:
    return redis_configured(timeout=2, retries=True)
