"""The baseline's no-op task, on the project's Celery app, so it runs under the same broker
settings as the engine's drains (acks late, prefetch 1, the same Redis and workers)."""

from __future__ import annotations

from celery import shared_task

from continuity.delivery.redis_connection import redis_client

NOOP_TASK = "devtools.bench.noop"


@shared_task(name=NOOP_TASK)
def noop(done_key: str) -> None:
    # Nothing but the one Redis command that tells the sender it ran.
    redis_client().rpush(done_key, 1)
