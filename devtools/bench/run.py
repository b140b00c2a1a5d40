"""A benchmark run: a fresh database and Redis, the sections asked for, then the report."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import connection

from .baseline import baseline_run
from .database import BenchDatabase
from .growth import growth_run
from .latency import latency_run
from .machine import git_commit, machine, versions
from .memory import memory_run
from .plan import Plan
from .recovery import recovery_run
from .report import SECTIONS, Report
from .rig import BenchError, Rig
from .stats import Section
from .streaming import streaming_run
from .throughput import throughput_run
from .tools import tools_run

# Run order: the tool round and latency count in-process before any worker starts; recovery
# kills its workers last; the baseline runs before throughput, which reports its ratio to it.
RUN_ORDER = (
    "tools", "latency", "baseline", "throughput", "growth", "streaming", "memory", "recovery"
)  # fmt: skip
BUSY = 1.0  # load average above which the machine is not quiet
RUNNERS: dict[str, Callable[[Rig, Plan, dict[str, Section]], Section]] = {
    "baseline": lambda rig, plan, done: baseline_run(rig, plan),
    "throughput": lambda rig, plan, done: throughput_run(rig, plan, baseline=done.get("baseline")),
    "latency": lambda rig, plan, done: latency_run(rig, plan),
    "growth": lambda rig, plan, done: growth_run(rig, plan),
    "recovery": lambda rig, plan, done: recovery_run(rig, plan),
    "streaming": lambda rig, plan, done: streaming_run(rig, plan),
    "memory": lambda rig, plan, done: memory_run(rig, plan),
    "tools": lambda rig, plan, done: tools_run(rig, plan),
}


def postgres_started():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        return cursor.fetchone()[0]


def bench_run(
    *,
    plan: Plan,
    only: list[str],
    database: str,
    keep_database: bool,
    connection_limit: int,
    command: str,
    say: Callable[[str], None],
) -> Report:
    started, clock, where = datetime.now(UTC), time.monotonic(), machine()
    bench_database = BenchDatabase(database, connection_limit=connection_limit)
    rig = Rig(bench_database)
    say(f"Logs of the run's processes: {rig.log_dir}")
    if os.getloadavg()[0] > BUSY:
        say(f"Load average {os.getloadavg()[0]:.1f}: other work here will skew the figures.")
    try:
        bench_database.create()
        found, server_started = versions(rig.redis.url), postgres_started()
        done: dict[str, Section] = {}
        for key in (key for key in RUN_ORDER if key in only):
            say(f"{key}…")
            section_started = time.monotonic()
            done[key] = RUNNERS[key](rig, plan, done)
            say(f"{key}: {time.monotonic() - section_started:.0f} s")
        if postgres_started() != server_started:
            raise BenchError("PostgreSQL restarted during the run: its figures are not usable.")
    finally:
        rig.close()
        if not keep_database:
            bench_database.drop()
    return Report(
        sections=[done[key] for key in SECTIONS if key in done],
        started=f"{started:%Y-%m-%d %H:%M} UTC",
        seconds=time.monotonic() - clock,
        commit=git_commit(),
        command=command,
        machine=where,
        versions=found,
        plan=plan,
    )
