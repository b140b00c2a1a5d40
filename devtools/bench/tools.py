"""(8) A tool round: what one built-in tool call adds to a reply, beyond the tool's own time.

The same drain as the latency section's in-process one, for a reply with no call ("note
number N") and for a reply whose first round calls `calculate` ("What is N + 1?": a pure tool
that takes microseconds), alternately, in one conversation. The call adds a round's checkpoint
with the call's row, the call's running mark and its result: the target is at most 3 ms at p50.
"""

from __future__ import annotations

import statistics
import time

import redis
from django.test.utils import override_settings

from continuity.models import ToolCall

from .counting import cost_of
from .latency import WARM_UP, cost_figures, drain_as_worker, drain_sequence
from .plan import Plan
from .rig import BenchError, Rig
from .stats import Figure, Section, latency_figures, percentile
from .traffic import conversations_new, message_send

PLAIN = "Bench note number {n}"
WITH_A_CALL = "What is {n} + 1?"


def tools_run(rig: Rig, plan: Plan) -> Section:
    if not rig.quiet():
        raise BenchError("The tools section times in-process and must run before workers.")
    with override_settings(CONTINUITY_BUILTIN_TOKEN_DELAY=0):
        (conversation,) = conversations_new(1)
        for n in range(WARM_UP):
            answer(conversation, rig, PLAIN.format(n=n))
            answer(conversation, rig, WITH_A_CALL.format(n=n))
        plain_times, call_times = [], []
        for _ in range(plan.repetitions):
            plain, called = [], []
            for n in range(plan.latency_messages):
                plain.append(answer(conversation, rig, PLAIN.format(n=n)))
                called.append(answer(conversation, rig, WITH_A_CALL.format(n=n)))
            plain_times.append(plain)
            call_times.append(called)
        costs = {}
        for name, text in (("no call", PLAIN), ("one call", WITH_A_CALL)):
            message_send(conversation, text.format(n=0))
            sequence = drain_sequence(conversation.pk, rig)
            with cost_of(rig.redis.url) as cost:
                drain_as_worker(conversation.pk, sequence)
            costs[name] = cost
        calls = ToolCall.objects.filter(message__conversation=conversation)
        tool_seconds = [call.seconds or 0.0 for call in calls if call.state == "done"]
    redis.Redis.from_url(rig.redis.url).flushall()  # the drains answered here
    added = [
        (percentile(called, 50) - percentile(plain, 50)) * 1000
        for plain, called in zip(plain_times, call_times, strict=True)
    ]
    return Section(
        "tools",
        "A tool round",
        figures=[
            *latency_figures("drain, reply with no call", plain_times),
            *latency_figures("drain, reply with one built-in call", call_times),
            Figure(
                "added by the call, p50",
                "ms",
                added,
                note="target ≤ 3 ms beyond the tool's own time",
            ),
            Figure(
                "the tool's own time (calculate), median",
                "ms",
                [statistics.median(tool_seconds) * 1000 if tool_seconds else 0.0],
            ),
            *cost_figures("reply with no call", [costs["no call"]]),
            *cost_figures("reply with one call", [costs["one call"]]),
        ],
        notes=[
            f"{plan.latency_messages} pairs of messages per repetition in one conversation, "
            "alternately with no call and with one `calculate` call, each drained in this "
            "process as the worker would (no Celery), the built-in brain writing at full speed.",
            "The call's reply has two rounds: the first asks for the call (checkpointed with "
            "the call's row), the second writes the reply with its result.",
        ],
    )


def answer(conversation, rig: Rig, text: str) -> float:
    message_send(conversation, text)
    sequence = drain_sequence(conversation.pk, rig)
    started = time.perf_counter()
    drain_as_worker(conversation.pk, sequence)
    return time.perf_counter() - started
