"""(2) Throughput: messages per second from accept to reply committed, zero-think built-in
brain, one worker with 2 processes (prefork, as production), messages spread over many
conversations; and its ratio to the no-op baseline."""

from __future__ import annotations

import math
import time

from .plan import Plan
from .rig import Rig
from .stats import Figure, Section, ratio
from .traffic import all_answered, conversations_new, spread


def throughput_run(rig: Rig, plan: Plan, *, baseline: Section | None) -> Section:
    rig.shared_worker()
    rates, accept_rates = [], []
    for _ in range(plan.repetitions):
        conversations = conversations_new(plan.conversations)
        ids = [c.pk for c in conversations]
        started = time.perf_counter()
        spread(conversations, plan.throughput_messages)
        accepted = time.perf_counter() - started
        all_answered(ids, timeout=600)
        rates.append(plan.throughput_messages / (time.perf_counter() - started))
        accept_rates.append(plan.throughput_messages / accepted)
    noop = baseline.figure("no-op tasks") if baseline else None
    return Section(
        "throughput",
        "Throughput",
        figures=[
            Figure("messages, accept to reply committed", "messages/s", rates),
            Figure("ratio to the no-op baseline", "ratio", ratios(rates, noop)),
            Figure("accepts while the worker answers", "accepts/s", accept_rates),
        ],
        notes=[
            f"{plan.throughput_messages} messages over {plan.conversations} new conversations, "
            "accepted by `message_accept` as fast as one process can, timed from the first "
            "accept until none is waiting (polled every 20 ms).",
            "Ratio: messages/s of each repetition over the baseline's median no-op tasks/s "
            "(empty when the baseline did not run: `--only baseline,throughput`).",
        ],
    )


def ratios(rates: list[float], noop: Figure | None) -> list[float]:
    if noop is None:
        return [math.nan]
    return [ratio(rate, noop.value) for rate in rates]
