"""How much each section does: the full run, and the smoke run that `make test` makes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """The sizes the targets name. The full run took 8 minutes on this project's 2-core machine
    (docs/benchmarks.md says how long its run took); on a slower day, `--client-messages 1`
    and `--memory-messages 500` shorten the two longest sections."""

    repetitions: int = 3
    noop_tasks: int = 1_000
    noop_round_trips: int = 100
    conversations: int = 50
    throughput_messages: int = 1_000
    latency_messages: int = 20
    growth_sizes: tuple[int, ...] = (100, 10_000, 100_000)
    growth_messages: int = 10
    context_assemblies: int = 20
    storage_exchanges: tuple[int, ...] = (10, 5_000)
    recovery_trials: int = 5
    stream_messages: int = 10
    clients: int = 200
    client_messages: int = 10
    memory_warmup: int = 20
    memory_messages: int = 10_000


SMOKE = Plan(
    repetitions=1,
    noop_tasks=20,
    noop_round_trips=5,
    conversations=5,
    throughput_messages=10,
    latency_messages=3,
    growth_sizes=(100, 1_000),
    growth_messages=2,
    context_assemblies=3,
    storage_exchanges=(10, 50),
    recovery_trials=1,
    stream_messages=2,
    clients=3,
    client_messages=2,
    memory_warmup=2,
    memory_messages=10,
)
