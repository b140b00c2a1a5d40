"""(4) Growth: per-message latency and context assembly (`context_gather` + `context_load`) as
one conversation's history grows, as ratios to the smallest; and what the engine stores per
exchange (checkpoints, the run's context) early and late in a long conversation.

Prior history is written in one SQL statement (through the pipeline, 100,000 messages would
take hours). It has no summary: the first message sent afterwards compacts it, as the engine
would have done along the way, and is reported apart.
"""

from __future__ import annotations

import time

from django.db import connection

from continuity.context.assembly import context_gather, context_load
from continuity.models import Checkpoint, Message, ReplyChunk, Run, RunContext

from .plan import Plan
from .rig import Rig
from .stats import Figure, Section, latency_figures
from .traffic import conversations_new, one_at_a_time

# Ids interleave as the pipeline leaves them (each question, then its reply); the texts have
# the length of the bench's own exchanges ("discuss" replies of the built-in brain).
HISTORY_SQL = """
WITH exchanges AS MATERIALIZED (
    SELECT n, nextval(%(sequence)s) AS question, nextval(%(sequence)s) AS answer
    FROM generate_series(1, %(exchanges)s) AS n
)
INSERT INTO {table} (id, conversation_id, role, text, client_id, state, attempts,
    interruptions, version, reply_to_id, stopped, reasked_from_id, created_at, updated_at)
SELECT question, %(conversation)s, 'user', format(%(question_text)s, n), NULL::uuid, 'done', 1,
    0, 3, NULL::bigint, false, NULL::bigint, now(), now() FROM exchanges
UNION ALL
SELECT answer, %(conversation)s, 'assistant', format(%(answer_text)s, n, n), NULL::uuid, 'done',
    0, 0, 1, question, false, NULL::bigint, now(), now() FROM exchanges
ORDER BY 1
"""
# Each question was answered by one attempt, whose run stays: the lease check of every new
# attempt must not read them all.
HISTORY_RUNS_SQL = """
INSERT INTO {table} (conversation_id, message_id, attempt, state, node, incarnation, worker,
    ended_at, error, traceback)
SELECT conversation_id, id, 1, 'completed', 'history', '', '', now(), '', ''
FROM {messages} WHERE conversation_id = %(conversation)s AND role = 'user'
"""
QUESTION = "History message %s: how is it going?"
ANSWER = (
    "You said: “History message %s: how is it going?”. That's message %s of this "
    "conversation. Tell me your goal and I'll help you plan it."
)


def growth_run(rig: Rig, plan: Plan) -> Section:
    rig.shared_worker()
    section = Section("growth", "Growth with the length of a conversation")
    measured = growth_measure(plan)
    section.figures += growth_figures(measured)
    for exchange in plan.storage_exchanges:
        section.figures += storage_figures(exchange, stored_at_exchange(exchange))
    section.notes += growth_notes(measured, plan)
    return section


def growth_measure(plan: Plan) -> dict[int, dict]:
    """Every size's conversation first; then each repetition measures every size in turn, so
    that a ratio compares figures taken a few seconds apart (measured size after size, a
    machine whose speed drifts made the ratios drift with it)."""
    conversations, measured = {}, {}
    for size in plan.growth_sizes:
        (conversation,) = conversations_new(1)
        history_insert(conversation.pk, exchanges=size // 2)
        conversations[size] = conversation
        first = one_at_a_time(conversation, 1)[1]
        measured[size] = {"first": first, "replies": [], "assemblies": []}
    for _ in range(plan.repetitions):
        for size, conversation in conversations.items():
            replies = one_at_a_time(conversation, plan.growth_messages)[1]
            measured[size]["replies"].append(replies)
    questions = {size: last_question(c) for size, c in conversations.items()}
    for _ in range(plan.repetitions):
        for size, message in questions.items():
            times = [assembly_time(message) for _ in range(plan.context_assemblies)]
            measured[size]["assemblies"].append(times)
    for size, message in questions.items():
        refs = context_gather(message=message)
        measured[size].update(exchanges=len(refs.exchanges), summary=refs.summary_id is not None)
    return measured


def last_question(conversation) -> Message:
    return (
        Message.objects.select_related("conversation")
        .filter(conversation=conversation, role=Message.Role.USER)
        .last()
    )


def history_insert(conversation_id: int, *, exchanges: int) -> None:
    table = Message._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        (sequence,) = cursor.fetchone()
        cursor.execute(
            HISTORY_SQL.format(table=connection.ops.quote_name(table)),
            {
                "sequence": sequence,
                "exchanges": exchanges,
                "conversation": conversation_id,
                "question_text": QUESTION,
                "answer_text": ANSWER,
            },
        )
        runs = connection.ops.quote_name(Run._meta.db_table)
        cursor.execute(
            HISTORY_RUNS_SQL.format(table=runs, messages=connection.ops.quote_name(table)),
            {"conversation": conversation_id},
        )
        # Now rather than by autovacuum in the middle of the measurements (it would start on
        # so many new rows); the planner then also knows the tables' new sizes.
        cursor.execute(f"VACUUM ANALYZE {connection.ops.quote_name(table)}")
        cursor.execute(f"VACUUM ANALYZE {runs}")


def assembly_time(message: Message) -> float:
    started = time.perf_counter()
    refs = context_gather(message=message)
    context_load(refs=refs, message=message, attempt=1)
    return time.perf_counter() - started


def growth_figures(measured: dict[int, dict]) -> list[Figure]:
    """Each repetition's ratio is to the smallest size's figure of the same repetition."""
    smallest = min(measured)
    base_reply = p50(measured[smallest]["replies"]).reps
    base_assembly = p50(measured[smallest]["assemblies"]).reps
    figures = []
    for size, data in measured.items():
        reply = p50(data["replies"], f"accept → reply at {size:,} prior messages")
        assembly = p50(data["assemblies"], f"context assembly at {size:,} prior messages")
        first = data["first"][0] * 1000
        figures += [
            reply,
            Figure(f"  ratio to {smallest:,}", "ratio", per_rep_ratios(reply.reps, base_reply)),
            assembly,
            Figure(
                f"  ratio to {smallest:,}",
                "ratio",
                per_rep_ratios(assembly.reps, base_assembly),
            ),
            Figure(f"first message after {size:,} bulk-written messages", "ms", [first]),
        ]
    return figures


def per_rep_ratios(values: list[float], bases: list[float]) -> list[float]:
    return [value / base for value, base in zip(values, bases, strict=True)]


def p50(samples_per_rep: list[list[float]], name: str = "") -> Figure:
    return latency_figures(name, samples_per_rep)[0]


def stored_at_exchange(exchange: int) -> dict[str, int]:
    """Bytes stored for the question of a conversation's exchange'th exchange (PostgreSQL's
    pg_column_size: as stored, after compression)."""
    (conversation,) = conversations_new(1)
    history_insert(conversation.pk, exchanges=exchange - 2)
    # exchange - 1 compacts a long bulk history; the measured one is ordinary
    one_at_a_time(conversation, 2)
    message = Message.objects.filter(conversation=conversation, role=Message.Role.USER).last()
    tables = {
        model: connection.ops.quote_name(model._meta.db_table)
        for model in (Checkpoint, RunContext, Run, ReplyChunk)
    }
    with connection.cursor() as cursor:
        cursor.execute(
            f"""SELECT
            (SELECT coalesce(sum(pg_column_size(c.output)), 0) FROM {tables[Checkpoint]} c
             WHERE c.message_id = %(m)s),
            (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM {tables[Checkpoint]} c
             WHERE c.message_id = %(m)s),
            (SELECT coalesce(sum(pg_column_size(rc.*)), 0) FROM {tables[RunContext]} rc
             JOIN {tables[Run]} r ON r.id = rc.run_id WHERE r.message_id = %(m)s),
            (SELECT coalesce(sum(pg_column_size(ch.*)), 0) FROM {tables[ReplyChunk]} ch
             WHERE ch.message_id = %(m)s)""",
            {"m": message.pk},
        )
        outputs, checkpoints, contexts, chunks = cursor.fetchone()
    return {"outputs": outputs, "checkpoints": checkpoints, "contexts": contexts, "chunks": chunks}


def storage_figures(exchange: int, stored: dict[str, int]) -> list[Figure]:
    return [
        Figure(f"checkpoint outputs stored at exchange {exchange:,}", "bytes", [stored["outputs"]]),
        Figure(
            f"checkpoint rows stored at exchange {exchange:,}", "bytes", [stored["checkpoints"]]
        ),
        Figure(f"run context row stored at exchange {exchange:,}", "bytes", [stored["contexts"]]),
        Figure(f"reply chunk rows stored at exchange {exchange:,}", "bytes", [stored["chunks"]]),
    ]


def growth_notes(measured: dict[int, dict], plan: Plan) -> list[str]:
    shapes = "; ".join(
        f"{size:,}: {data['exchanges']} verbatim exchanges"
        + (" after a summary" if data["summary"] else ", no summary")
        for size, data in measured.items()
    )
    return [
        f"Per size: one conversation with that many prior messages (half questions, half "
        f"replies, state done, and the completed run of each question), then "
        f"{plan.growth_messages} messages per repetition one at a "
        "time through the worker (p50 shown), and context assembly of the last question "
        f"({plan.context_assemblies} per repetition, in the bench process; p50 shown). Every "
        "conversation is written first; each repetition then measures every size in turn, and "
        "its ratio is to the smallest size's figure of the same repetition.",
        f"Context given to the brain at the end: {shapes}.",
        "First message after bulk-written history: it compacts the history when it passes the "
        "context budget (a one-off; a conversation that grew through the pipeline compacts "
        "along the way). One measurement.",
        "Stored per exchange: checkpoints (plan, respond, remember) and the run's context, for the "
        "last message of a conversation after bulk-written history; one measurement each.",
    ]
