"""(3) Latency: one conversation, one message at a time, accept → reply committed, through the
worker; and what one message costs, counted: SQL statements, transactions, Redis commands.

The counts come from running the engine's two halves in this process, where every statement
can be seen: `message_accept` (what the web view calls) and, as the worker would on receiving
the drain, `drain_received` then `drain_conversation`. They must run before any worker starts,
or a worker would take the drain first. Celery's own broker traffic is counted end to end.
"""

from __future__ import annotations

import time
from collections import Counter

import redis
from django.test.utils import override_settings

from continuity.delivery.drains import drain_marker_key, drain_received
from continuity.delivery.processing import drain_conversation

from .counting import Cost, RedisTally, cost_of
from .plan import Plan
from .rig import BenchError, Rig
from .stats import Figure, Section, latency_figures
from .traffic import conversations_new, message_send, one_at_a_time

WARM_UP = 2  # the first reply of a conversation also titles it: not the common turn


def latency_run(rig: Rig, plan: Plan) -> Section:
    accept_costs, drain_costs, inprocess = hot_path(rig, plan)
    rig.shared_worker()
    (conversation,) = conversations_new(1)
    one_at_a_time(conversation, WARM_UP)
    accepts, replies = [], []
    for _ in range(plan.repetitions):
        accepted, answered = one_at_a_time(conversation, plan.latency_messages)
        accepts.append(accepted)
        replies.append(answered)
    redis_per_message, redis_kinds = end_to_end_redis(rig, plan, conversation)
    return Section(
        "latency",
        "Latency and cost of one message",
        figures=[
            *latency_figures("accept → reply committed", replies),
            *latency_figures("message_accept alone", accepts),
            *cost_figures("message_accept", accept_costs),
            *latency_figures("drain_conversation in-process", inprocess),
            *cost_figures("drain_conversation", drain_costs),
            Figure("Redis commands per message, end to end", "commands", redis_per_message),
        ],
        notes=latency_notes(plan),
        details=[
            breakdown("message_accept", accept_costs[-1]),
            breakdown("drain_received + drain_conversation", drain_costs[-1]),
            redis_breakdown(redis_kinds, plan.latency_messages),
        ],
    )


def end_to_end_redis(rig: Rig, plan: Plan, conversation) -> tuple[list[float], Counter]:
    """Redis commands per message with the worker, counted in passes of their own: MONITOR
    slows Redis and this process down, so nothing is timed under it."""
    per_message = []
    for _ in range(plan.repetitions):
        with RedisTally(rig.redis.url) as tally:
            one_at_a_time(conversation, plan.latency_messages)
        per_message.append(sum(tally.sent.values()) / plan.latency_messages)
    return per_message, tally.sent


def hot_path(rig: Rig, plan: Plan) -> tuple[list[Cost], list[Cost], list[list[float]]]:
    """Costs of accept and drain, and in-process drain times, with no worker running."""
    if not rig.quiet():
        raise BenchError("The latency section counts in-process and must run before workers.")
    with override_settings(CONTINUITY_BUILTIN_TOKEN_DELAY=0):
        (conversation,) = conversations_new(1)
        for _ in range(WARM_UP):
            message_send(conversation)
            drain_as_worker(conversation.pk, drain_sequence(conversation.pk, rig))
        accepts, drains = [], []
        for _ in range(plan.repetitions):
            with cost_of(rig.redis.url) as accept:
                message_send(conversation)
            sequence = drain_sequence(conversation.pk, rig)
            with cost_of(rig.redis.url) as drain:
                drain_as_worker(conversation.pk, sequence)
            accepts.append(accept)
            drains.append(drain)
        times = [drain_times(conversation, plan, rig) for _ in range(plan.repetitions)]
    # The drains `message_accept` queued have been answered here; no worker should get them.
    redis.Redis.from_url(rig.redis.url).flushall()
    return accepts, drains, times


def drain_sequence(conversation_id: int, rig: Rig) -> int | None:
    """The sequence number of the drain `message_accept` queued, which a worker would read
    from the task (here from the conversation's marker, outside what is counted)."""
    marker = redis.Redis.from_url(rig.redis.url).get(drain_marker_key(conversation_id))
    return None if marker is None else int(marker)


def drain_as_worker(conversation_id: int, sequence: int | None) -> None:
    """What a worker does with a drain: note its receipt (which frees the conversation's
    marker for the next enqueue), then answer the oldest waiting message."""
    if sequence is not None:
        drain_received(conversation_id=conversation_id, sequence=sequence)
    drain_conversation(conversation_id=conversation_id, node="bench-inprocess")


def drain_times(conversation, plan: Plan, rig: Rig) -> list[float]:
    times = []
    for _ in range(plan.latency_messages):
        message_send(conversation)
        sequence = drain_sequence(conversation.pk, rig)
        started = time.perf_counter()
        drain_as_worker(conversation.pk, sequence)
        times.append(time.perf_counter() - started)
    return times


def cost_figures(name: str, costs: list[Cost]) -> list[Figure]:
    return [
        Figure(f"{name}: SQL statements", "statements", [c.statements for c in costs]),
        Figure(f"{name}: transactions", "transactions", [c.transactions for c in costs]),
        Figure(f"{name}: database round trips", "round trips", [c.round_trips for c in costs]),
        Figure(f"{name}: Redis commands", "commands", [c.redis_commands for c in costs]),
        Figure(
            f"{name}: Redis commands run by Lua scripts",
            "commands",
            [c.redis_in_scripts for c in costs],
        ),
    ]


def latency_notes(plan: Plan) -> list[str]:
    return [
        f"{plan.latency_messages} messages per repetition in one conversation, each sent once "
        "the previous reply was committed; replies are seen by polling the database every 1 ms "
        "(one prepared statement a poll).",
        "Counts: one steady-state message (the conversation's third or later; no facts stated), "
        "run in the bench process. Transactions: each `atomic` block that ran statements, plus "
        "each statement outside one (autocommit). Round trips: statements sent together count "
        "once, with the BEGIN before them and the COMMIT sent with them; a COMMIT of its own "
        "counts one.",
        "Redis commands: those clients send (MONITOR); the commands their Lua scripts run on the "
        "server are counted apart. End to end adds the worker's broker traffic and whatever the "
        "idle worker sends meanwhile (its BRPOP every second, heartbeats).",
        "drain_conversation in-process: the same call the worker makes, without Celery, in "
        "this process: the engine's own time for one message.",
    ]


def redis_breakdown(kinds: Counter, messages: int) -> str:
    lines = [
        f"**End to end, with the worker**: Redis commands per message (over {messages} messages)",
        "",
        "| Redis command | per message |",
        "| --- | ---: |",
    ]
    lines += [f"| `{kind}` | {n / messages:.1f} |" for kind, n in kinds.most_common()]
    return "\n".join(lines)


def breakdown(name: str, cost: Cost) -> str:
    """A markdown table of one run's statements by kind and Redis commands by name."""
    lines = [
        f"**{name}**: {cost.statements} statements in {cost.transactions} transactions "
        f"({cost.round_trips} round trips), {cost.redis_commands} Redis commands "
        f"(+{cost.redis_in_scripts} inside Lua scripts)",
        "",
        "| statement | count |",
        "| --- | ---: |",
    ]
    lines += [f"| `{kind}` | {n} |" for kind, n in cost.statement_kinds.most_common()]
    lines += ["", "| Redis command | count |", "| --- | ---: |"]
    lines += [f"| `{kind}` | {n} |" for kind, n in cost.redis_kinds.most_common()]
    return "\n".join(lines)
