"""(1) Baseline: what Celery itself costs on this machine, with the engine's broker settings.

A no-op task on the project's Celery app (acks late, prefetch 1, prefork 2, the same Redis and
worker as the engine): tasks per second to completion, and the round trip of one task.
"""

from __future__ import annotations

import time
import uuid

import redis

from continuity import celery_app

from .plan import Plan
from .rig import BenchError, Rig, wait_for
from .stats import Figure, Section, latency_figures
from .tasks import NOOP_TASK


def baseline_run(rig: Rig, plan: Plan) -> Section:
    rig.shared_worker()
    client = redis.Redis.from_url(rig.redis.url)
    noop_send(client)  # the first send connects the producer; not measured
    rates, trips = [], []
    for _ in range(plan.repetitions):
        rates.append(noop_rate(client, plan.noop_tasks))
        trips.append([noop_round_trip(client) for _ in range(plan.noop_round_trips)])
    return Section(
        "baseline",
        "Baseline: a no-op Celery task",
        figures=[Figure("no-op tasks", "tasks/s", rates), *latency_figures("round trip", trips)],
        notes=[
            f"{plan.noop_tasks} tasks sent as fast as possible, timed from the first send to the "
            f"last completion; {plan.noop_round_trips} round trips, one task at a time "
            "(send, until the task's RPUSH reaches the sender's BLPOP).",
            "The task's only work is that RPUSH, which tells the sender it ran.",
        ],
    )


def noop_send(client: redis.Redis) -> None:
    key = f"bench:noop:{uuid.uuid4().hex}"
    celery_app.send_task(NOOP_TASK, (key,))
    client.blpop([key], timeout=60)


def noop_rate(client: redis.Redis, count: int) -> float:
    key = f"bench:noop:{uuid.uuid4().hex}"
    started = time.perf_counter()
    for _ in range(count):
        celery_app.send_task(NOOP_TASK, (key,))
    wait_for(
        lambda: client.llen(key) >= count,
        timeout=300,
        what=f"{count} no-op tasks",
        every=0.002,
    )
    elapsed = time.perf_counter() - started
    client.delete(key)
    return count / elapsed


def noop_round_trip(client: redis.Redis) -> float:
    key = f"bench:noop:{uuid.uuid4().hex}"
    started = time.perf_counter()
    celery_app.send_task(NOOP_TASK, (key,))
    if client.blpop([key], timeout=60) is None:
        raise BenchError("A no-op task did not run within 60 s")
    return time.perf_counter() - started
