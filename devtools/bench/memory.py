"""(7) Memory: resident set size of a worker's main process and its pool processes, before
and after many messages (a fresh worker, zero-think brain, after a warm-up that loads what is
loaded lazily). Pool processes are never recycled (no max-tasks-per-child), so a leak shows."""

from __future__ import annotations

import time
from pathlib import Path

from devtools.processes import WorkerChild

from .plan import Plan
from .rig import BenchError, Rig
from .stats import Figure, Section
from .traffic import conversations_new, spread, still_waiting

SAMPLES = 4  # RSS also after each quarter of the messages


def memory_run(rig: Rig, plan: Plan) -> Section:
    rig.shared_worker_stop()
    worker = rig.worker(node=rig.node("bench-memory"))
    conversations = conversations_new(plan.conversations)
    ids = [c.pk for c in conversations]
    spread(conversations, plan.memory_warmup)
    answered_with_rss(worker, ids, [])
    before = rss(worker)
    spread(conversations, plan.memory_messages)
    trail = answered_with_rss(worker, ids, marks(plan.memory_messages))
    after = rss(worker)
    worker.kill_all()  # idle once every message is answered
    if sorted(before["pool"]) != sorted(after["pool"]):
        raise BenchError("A pool process of the memory worker was replaced during the run.")
    pool_before, pool_after = sum(before["pool"].values()), sum(after["pool"].values())
    per_thousand = (pool_after - pool_before) / plan.memory_messages * 1000
    after_n = f"after {plan.memory_messages:,} messages"
    return Section(
        "memory",
        "Memory of a worker",
        figures=[
            Figure("main process RSS before", "MB", [before["main"]]),
            Figure(f"main process RSS {after_n}", "MB", [after["main"]]),
            Figure("pool processes RSS before (sum of 2)", "MB", [pool_before]),
            Figure(f"pool processes RSS {after_n}", "MB", [pool_after]),
            Figure("pool growth per 1,000 messages", "MB", [per_thousand]),
        ],
        notes=[
            f"{plan.memory_warmup} messages of warm-up, then {plan.memory_messages:,} over "
            f"{plan.conversations} conversations; VmRSS from /proc; one measurement.",
            "Pool RSS along the way (messages answered: MB): "
            + ", ".join(f"{n:,}: {mb:.1f}" for n, mb in trail)
            + ".",
        ],
    )


def marks(count: int) -> list[int]:
    return [count * (i + 1) // SAMPLES for i in range(SAMPLES)]


def answered_with_rss(worker: WorkerChild, ids: list[int], at: list[int]):
    """Wait until nothing is waiting, noting the pool's RSS as the answered count passes each
    mark (counted from now)."""
    total = still_waiting(ids)
    trail, deadline = [], time.monotonic() + 3600
    while (left := still_waiting(ids)) and time.monotonic() < deadline:
        while at and total - left >= at[0]:
            trail.append((at.pop(0), sum(rss(worker)["pool"].values())))
        time.sleep(0.1)
    if left:
        raise BenchError(f"{left} message(s) still waiting after an hour")
    trail += [(mark, sum(rss(worker)["pool"].values())) for mark in at]
    return trail


def rss(worker: WorkerChild) -> dict:
    """MB resident, of the main process and of each pool process (by pid)."""
    return {"main": rss_mb(worker.pid), "pool": {pid: rss_mb(pid) for pid in worker.children()}}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0
