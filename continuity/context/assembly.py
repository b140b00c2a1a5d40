"""The startup context of a run, in the layered order of docs/design.md, stored by reference.

identity and rules → long-term memory facts → current task state (newest handoff, last
task-state checkpoint) → compacted summary + the turns after it → messages still waiting.

A `RunContext` keeps only ids of versioned rows (facts are never changed in place, handoffs
and summaries never overwritten), so its size does not grow with the conversation, and
`context_load` rebuilds exactly what the brain was given.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Q

from .. import sql
from ..brains import Context, Turn
from ..models import (
    Checkpoint,
    Handoff,
    MemoryFact,
    Message,
    Run,
    RunContext,
    Summary,
    handoff_markdown,
)
from .handoffs import handoff_latest_statement, handoff_note, handoff_of
from .tokens import tokens_estimate


@dataclass
class ContextRefs:
    identity: str
    facts: list[int] = field(default_factory=list)
    handoff_id: int | None = None
    checkpoint_id: int | None = None
    summary_id: int | None = None
    pairs: list[list[int]] = field(default_factory=list)  # [user id, reply id?] per turn
    pending: list[int] = field(default_factory=list)

    @property
    def turns(self) -> list[int]:
        return [pk for pair in self.pairs for pk in pair]


# The conditions of the message table's partial indexes, written out for the hand-written
# statements, on the one table they read (unqualified). The values are written out, not
# bound: only then does a statement prepared once for any values know it may read the index.
# They are `models.WAITING` and `models.ANSWERED_QUESTION`, which tests/continuity/
# test_indexes.py checks against the indexes PostgreSQL holds.
# User messages that wait for their answer (queued, or being answered): `message_pending`.
WAITING = "role = '{}' AND state IN ('{}', '{}')".format(Message.Role.USER, *Message.PENDING_STATES)
# Those of one conversation; its one value is the conversation's id.
PENDING = f"conversation_id = %s AND {WAITING}"
# The answered questions of the shown branch: `message_answered_question`.
ANSWERED_QUESTION = (
    f"role = '{Message.Role.USER}' AND state = '{Message.State.DONE}' AND hidden_with_id IS NULL"
)
# The newest summary of the shown branch: one that covers turns now on a hidden branch (the
# conversation was edited before its end) would put them back into the prompt.
LATEST_SUMMARY = (
    "SELECT s.id, s.version, s.covers_through_id, s.text FROM continuity_summary AS s "
    "JOIN continuity_message AS m ON m.id = s.covers_through_id "
    "WHERE s.conversation_id = %s AND m.hidden_with_id IS NULL "
    "ORDER BY s.version DESC LIMIT 1"
)
# The answered questions of the shown branch before a message (its values: the conversation,
# the message, the conversation again), newest first. Written for the index of answered
# questions (`message_answered_question`, whose condition is ANSWERED_QUESTION), which
# holds exactly these rows in this order, whatever the statistics: the conversation and the
# bound are one range of (conversation, id) pairs, which the primary key cannot serve. As
# `conversation_id = %s AND id < %s`, a plan made for any value walked the message table's
# primary key back from the message, through every other conversation's messages.
QUESTIONS = (
    f"{ANSWERED_QUESTION} AND (q.conversation_id, q.id) < (%s, %s) "
    "AND (q.conversation_id, q.id) > (%s, 0) ORDER BY q.conversation_id DESC, q.id DESC"
)
# Those the newest summary does not cover.
AFTER_SUMMARY = f"t.id > COALESCE((SELECT covers_through_id FROM ({LATEST_SUMMARY}) AS s), 0)"
SUPPORT_WROTE = "(A person from support wrote this reply, not you.) "
# Each question with its reply and, on the newest question only, the checkpoint of its plan
# step (the task state it left).
TURN_COLUMNS = (
    "SELECT t.id, t.role, t.text, "
    "(SELECT a.id FROM continuity_message AS a WHERE a.reply_to_id = t.id), "
    # A reply from support (a takeover) is marked as such: the agent must not take it for its
    # own words.
    f"(SELECT CASE WHEN a.role = '{Message.Role.STAFF}' THEN '{SUPPORT_WROTE}' || a.text "
    "ELSE a.text END FROM continuity_message AS a WHERE a.reply_to_id = t.id), "
    "CASE WHEN t.id = MAX(t.id) OVER () THEN (SELECT c.id FROM continuity_checkpoint AS c "
    "WHERE c.message_id = t.id AND c.step = 'plan') END, "
    "CASE WHEN t.id = MAX(t.id) OVER () THEN (SELECT c.output FROM continuity_checkpoint AS c "
    "WHERE c.message_id = t.id AND c.step = 'plan') END "
)
# The most turns one read returns; more are read a window at a time (`turns_complete`).
TURNS_WINDOW = 200
# The turns after the summary among the newest TURNS_WINDOW + 1 questions, walked back from the
# message. A range of ids bounded by the summary leaves the planner a bound it cannot see (the
# summary is read by the same statement), and it then guesses the range is short: it walked
# the primary key through every message written since the summary, by every conversation (25
# ms for a conversation summarized 100,000 messages ago). Newest first with a limit, it reads
# the conversation's own questions only. Prepared like the others: its earlier form had to be
# planned at every run, which took the server more time than the rest of a message's
# statements together.
TURNS_SELECT = (
    f"{TURN_COLUMNS}FROM (SELECT q.id, q.role, q.text FROM continuity_message AS q "
    f"WHERE {QUESTIONS} LIMIT %s) AS t WHERE {AFTER_SUMMARY} ORDER BY t.id"
)


def summary_latest(*, conversation_id: int) -> Summary | None:
    return summary_of(sql.rows(LATEST_SUMMARY, [conversation_id]), conversation_id=conversation_id)


def summary_of(found: list[tuple], *, conversation_id: int) -> Summary | None:
    if not found:
        return None
    ((pk, version, covers_through_id, text),) = found
    return sql.instance(
        Summary,
        id=pk,
        conversation_id=conversation_id,
        version=version,
        covers_through_id=covers_through_id,
        text=text,
    )


def turns_statement(*, conversation_id: int, before_id: int) -> sql.Statement:
    """Each question with its reply (a reply that staff deleted leaves its question alone, not
    the context broken), and the newest one's plan checkpoint: see `turn_pairs` and
    `last_plan`. The reply is looked up by question, by its unique index: a join let the
    planner walk that index from its start, through every older reply of the table (5 ms at
    100,000 messages). More than TURNS_WINDOW rows: see `turns_complete`."""
    return TURNS_SELECT, [
        conversation_id,
        before_id,
        conversation_id,
        TURNS_WINDOW + 1,
        conversation_id,
    ]


def turns_complete(found: list[tuple], *, conversation_id: int) -> list[tuple]:
    """The rows of `turns_statement`, and when they fill its window, those of the turns before
    it, a window at a time, until the summary: compaction must see every turn, or those beyond
    the window would never be summarized (a long history not yet compacted, or a budget of many
    tokens)."""
    turns, window = list(found), found
    while len(window) > TURNS_WINDOW:
        older = window[0][0]
        window = sql.rows(*turns_statement(conversation_id=conversation_id, before_id=older))
        turns[:0] = window
    return turns


def turn_pairs(found: list[tuple]) -> list[list[tuple]]:
    """A reply is the assistant's answer to its question (`reply_to`)."""
    return [
        [row[:3], (row[3], Message.Role.ASSISTANT, row[4])] if row[3] is not None else [row[:3]]
        for row in found
    ]


def last_plan(found: list[tuple]) -> tuple[int, object] | None:
    """The plan step's checkpoint of the newest turn, (id, output), if it has one."""
    if not found or found[-1][5] is None:
        return None
    return found[-1][5], sql.json_value(found[-1][6])


def facts_statement(*, owner_id: int) -> sql.Statement:
    """The owner's current facts (as `MemoryFact.objects.current()`), as (id, key, value)."""
    return (
        "SELECT id, key, value FROM continuity_memoryfact "
        "WHERE owner_id = %s AND superseded_at IS NULL ORDER BY key",
        [owner_id],
    )


def pending_statement(*, conversation_id: int, message_id: int) -> sql.Statement:
    """Messages that wait behind this one, as (id, role, text), at most a history's worth."""
    return (
        f"SELECT id, role, text FROM continuity_message WHERE {PENDING} AND id > %s "
        "ORDER BY id LIMIT %s",
        [conversation_id, message_id, settings.CONTINUITY_HISTORY_TURNS],
    )


def context_gather(*, message: Message) -> ContextRefs:
    return context_assembled(message=message, attempt=0)[0]


def context_assembled(*, message: Message, attempt: int) -> tuple[ContextRefs, Context]:
    """What the next attempt on `message` should be given, by reference and as the brain reads
    it, from one pass over the rows: every turn the newest summary does not cover (compaction
    keeps that list short), never the whole history."""
    return context_of(
        message=message, attempt=attempt, found=sql.batch(*context_statements(message=message))
    )


def context_statements(*, message: Message) -> list[sql.Statement]:
    """The reads of `context_of`, which need none of each other's results."""
    conversation = message.conversation
    return [
        (LATEST_SUMMARY, [conversation.pk]),
        turns_statement(conversation_id=conversation.pk, before_id=message.pk),
        handoff_latest_statement(conversation_id=conversation.pk),
        facts_statement(owner_id=conversation.owner_id),
        pending_statement(conversation_id=conversation.pk, message_id=message.pk),
    ]


def context_of(
    *, message: Message, attempt: int, found: list[list[tuple]]
) -> tuple[ContextRefs, Context]:
    """`context_assembled`, from the rows of `context_statements`."""
    conversation = message.conversation
    summaries, turns, handoffs, facts, pending = found
    turns = turns_complete(turns, conversation_id=conversation.pk)
    summary = summary_of(summaries, conversation_id=conversation.pk)
    pairs = turn_pairs(turns)
    checkpoint = last_plan(turns)
    handoff = handoff_of(handoffs)
    refs = ContextRefs(
        identity=settings.CONTINUITY_IDENTITY,
        facts=[pk for pk, _, _ in facts],
        handoff_id=handoff.pk if handoff else None,
        checkpoint_id=checkpoint[0] if checkpoint else None,
        summary_id=summary.pk if summary else None,
        pairs=[[row[0] for row in pair] for pair in pairs],
        pending=[pk for pk, _, _ in pending],
    )
    context = Context(
        owner_id=conversation.owner_id,
        conversation_id=conversation.pk,
        message_id=message.pk,
        attempt=attempt,
        text=message.text,
        identity=refs.identity,
        facts={key: value for _, key, value in facts},
        handoff=handoff_note(handoff),
        task_checkpoint=checkpoint[1] if checkpoint else {},
        summary=summary.text if summary else "",
        history=[Turn(role, text) for pair in pairs for _, role, text in pair],
        pending=[Turn(role, text) for _, role, text in pending],
        retelling=retelling_of(message),
    )
    return refs, context


def retelling_of(message: Message) -> int:
    """How many earlier versions of `message` asked the same text (Regenerate); 0 for a message
    that is no version, without a query."""
    if not getattr(message, "version_of_id", None):
        return 0
    root = message.version_of_id
    return Message.objects.filter(
        Q(pk=root) | Q(version_of_id=root), pk__lt=message.pk, text=message.text
    ).count()


def refs_of(run_context: RunContext) -> ContextRefs:
    return ContextRefs(
        identity=run_context.identity,
        facts=run_context.facts,
        handoff_id=run_context.handoff_id,
        checkpoint_id=run_context.checkpoint_id,
        summary_id=run_context.summary_id,
        pairs=[[pk] for pk in run_context.turns],  # flattened again by `turns`
        pending=run_context.pending,
    )


def context_load(*, refs: ContextRefs, message: Message, attempt: int) -> Context:
    by_id = Message.objects.in_bulk([*refs.turns, *refs.pending])
    facts = MemoryFact.objects.in_bulk(refs.facts)
    handoff = Handoff.objects.filter(pk=refs.handoff_id).first() if refs.handoff_id else None
    summary = Summary.objects.filter(pk=refs.summary_id).first() if refs.summary_id else None
    checkpoint = (
        Checkpoint.objects.filter(pk=refs.checkpoint_id).first() if refs.checkpoint_id else None
    )
    return Context(
        owner_id=message.conversation.owner_id,
        conversation_id=message.conversation_id,
        message_id=message.pk,
        attempt=attempt,
        text=message.text,
        identity=refs.identity,
        facts={facts[pk].key: facts[pk].value for pk in refs.facts if pk in facts},
        handoff=handoff_note(handoff),
        task_checkpoint=checkpoint.output if checkpoint else {},
        summary=summary.text if summary else "",
        history=[Turn(by_id[pk].role, by_id[pk].text) for pk in refs.turns if pk in by_id],
        pending=[Turn(by_id[pk].role, by_id[pk].text) for pk in refs.pending if pk in by_id],
    )


def run_context_store(*, run: Run, refs: ContextRefs, tokens: int) -> RunContext:
    """The last write of the caller's fenced transaction (it holds the run's lock), which
    commits with it (`sql.batch`)."""
    statement, written = sql.insert_statement(
        RunContext,
        run_id=run.pk,
        identity=refs.identity,
        facts=refs.facts,
        handoff_id=refs.handoff_id,
        checkpoint_id=refs.checkpoint_id,
        summary_id=refs.summary_id,
        turns=refs.turns,
        pending=refs.pending,
        estimated_tokens=tokens,
    )
    (stored,) = sql.batch(statement, commit=True)
    return sql.inserted(RunContext, stored, written)


def run_context_load(run_context: RunContext) -> Context:
    run = run_context.run
    message = Message.objects.select_related("conversation").get(pk=run.message_id)
    return context_load(refs=refs_of(run_context), message=message, attempt=run.attempt)


# Which scope each part comes from, said in its heading: the person's, or this conversation's.
MEMORY_HEADING = "Long-term memory (about the person, shared by all their conversations)"
NOTES_HEADING = "Current task state (this conversation's own notes)"


def context_text(context: Context) -> str:
    """The context as one text, in the assembly order: what a language-model brain is sent,
    what the token estimate counts, and what staff read on the run's admin page."""
    parts = ["# Identity and rules", context.identity.strip() or "(none)", ""]
    parts += [f"# {MEMORY_HEADING}"]
    parts += [f"- {key}: {value}" for key, value in context.facts.items()] or ["(nothing yet)"]
    parts += ["", f"# {NOTES_HEADING}"]
    if note := context.handoff:
        parts += [
            f"Working memory (handoff v{note.version}, {Handoff.Reason(note.reason).label}):",
            "",
            handoff_markdown(
                written_at=note.written_at,
                current_state=note.current_state,
                critical_context=note.critical_context,
                next_steps=note.next_steps,
                decisions=note.decisions,
            ),
        ]
    else:
        parts += ["(no handoff yet)"]
    if checkpoint := context.task_checkpoint:
        parts += ["", f"Last task-state checkpoint: {checkpoint_line(checkpoint)}"]
    parts += ["", "# Summary of earlier turns", context.summary.strip() or "(none)", ""]
    parts += ["# Recent turns"]
    parts += [turn_line(turn) for turn in context.history] or ["(none)"]
    parts += ["", "# Arrived while the agent was busy or down"]
    parts += [turn_line(turn) for turn in context.pending] or ["(none)"]
    parts += ["", "# Message to answer", turn_line(Turn(Message.Role.USER, context.text))]
    return "\n".join(parts)


def checkpoint_line(output: dict) -> str:
    line = f"intent {output.get('intent', '?')}"
    if facts := output.get("facts"):
        line += "; facts " + ", ".join(f"{key}={value}" for key, value in sorted(facts.items()))
    if steps := output.get("steps"):
        line += "; plan " + " / ".join(steps)
    return line


def turn_line(turn: Turn) -> str:
    return f"{turn.role.capitalize()}: {turn.text}"


def context_tokens(context: Context) -> int:
    return tokens_estimate(context_text(context))


def run_context_text(run_context: RunContext) -> str:
    """A stored context rendered as the brain saw it, with what has gone since (forgotten
    facts, deleted messages) said rather than silently left out."""
    context = run_context_load(run_context)
    gone = []
    if missing := len(run_context.facts) - len(context.facts):
        gone.append(f"{missing} fact(s) the user has since asked to forget")
    if (
        missing := len(run_context.turns)
        + len(run_context.pending)
        - len(context.history)
        - len(context.pending)
    ):
        gone.append(f"{missing} message(s) deleted since")
    header = f"Estimated tokens: {run_context.estimated_tokens}"
    if gone:
        header += f" (not shown: {'; '.join(gone)})"
    return f"{header}\n\n{context_text(context)}"
