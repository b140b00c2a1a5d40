"""The startup context of a run, in the layered order of docs/design.md, stored by reference.

identity and rules → long-term memory facts → current task state (newest handoff, last
task-state checkpoint) → compacted summary + the turns after it → messages still waiting.

A `RunContext` keeps only ids of versioned rows (facts are never changed in place, handoffs
and summaries never overwritten), so its size does not grow with the conversation, and
`context_load` rebuilds exactly what the brain was given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from django.conf import settings
from django.db.models import Q

from .. import store
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
from ..store import contexts
from .handoffs import handoff_note
from .tokens import tokens_estimate


@dataclass
class ContextRefs:
    identity: str
    facts: list[int] = field(default_factory=list)
    handoff_id: int | None = None
    checkpoint_id: int | None = None
    summary_id: int | None = None
    exchanges: list[list[int]] = field(default_factory=list)  # [question id, reply id?] each
    waiting: list[int] = field(default_factory=list)

    @property
    def turns(self) -> list[int]:
        return [pk for exchange in self.exchanges for pk in exchange]


def summary_latest(*, conversation_id: int) -> Summary | None:
    return store.execute(contexts.summary_latest(conversation_id=conversation_id))


def turns_complete(
    found: list[contexts.TurnRow], *, conversation_id: int
) -> list[contexts.TurnRow]:
    """The turns `contexts.turns` found, and when they fill its window, those of the turns
    before it, a window at a time, until the summary: compaction must see every turn, or those
    beyond the window would never be summarized (a long history not yet compacted, or a budget
    of many tokens)."""
    turns, window = list(found), found
    while len(window) > contexts.TURNS_WINDOW:
        window = store.execute(
            contexts.turns(conversation_id=conversation_id, before_id=window[0].id)
        )
        turns[:0] = window
    return turns


class StoredTurn(NamedTuple):
    """A turn of the history, with the id of its message."""

    id: int
    role: str
    text: str


def history_exchanges(found: list[contexts.TurnRow]) -> list[list[StoredTurn]]:
    """The exchanges of the history: each question, and its reply if it has one (the
    assistant's answer to it, `reply_to`), as turns."""
    return [
        [
            StoredTurn(row.id, row.role, row.text),
            StoredTurn(row.reply_id, Message.Role.ASSISTANT, row.reply_text),
        ]
        if row.reply_id is not None
        else [StoredTurn(row.id, row.role, row.text)]
        for row in found
    ]


class ContextReads(NamedTuple):
    """The reads of `context_of`, which need none of each other's results."""

    summary: store.Query[Summary | None]
    turns: store.Query[list[contexts.TurnRow]]
    handoff: store.Query[Handoff | None]
    facts: store.Query[list[contexts.Fact]]
    waiting: store.Query[list[contexts.Waiting]]


def context_reads(*, message: Message) -> ContextReads:
    conversation = message.conversation
    return ContextReads(
        summary=contexts.summary_latest(conversation_id=conversation.pk),
        turns=contexts.turns(conversation_id=conversation.pk, before_id=message.pk),
        handoff=contexts.handoff_latest(conversation_id=conversation.pk),
        facts=contexts.facts_current(owner_id=conversation.owner_id),
        waiting=contexts.waiting_behind(conversation_id=conversation.pk, message_id=message.pk),
    )


def context_gather(*, message: Message) -> ContextRefs:
    return context_assembled(message=message, attempt=0)[0]


def context_assembled(*, message: Message, attempt: int) -> tuple[ContextRefs, Context]:
    """What the next attempt on `message` should be given, by reference and as the brain reads
    it, from one pass over the rows: every turn the newest summary does not cover (compaction
    keeps that list short), never the whole history."""
    reads = context_reads(message=message)
    return context_of(message=message, attempt=attempt, reads=reads, found=store.round_trip(*reads))


def context_of(
    *, message: Message, attempt: int, reads: ContextReads, found: store.Found
) -> tuple[ContextRefs, Context]:
    """`context_assembled`, from what its `reads` found."""
    conversation = message.conversation
    turns = turns_complete(found[reads.turns], conversation_id=conversation.pk)
    summary = found[reads.summary]
    exchanges = history_exchanges(turns)
    plan = turns[-1] if turns and turns[-1].plan_id is not None else None
    handoff = found[reads.handoff]
    facts = found[reads.facts]
    waiting = found[reads.waiting]
    refs = ContextRefs(
        identity=settings.CONTINUITY_IDENTITY,
        facts=[fact.id for fact in facts],
        handoff_id=handoff.pk if handoff else None,
        checkpoint_id=plan.plan_id if plan else None,
        summary_id=summary.pk if summary else None,
        exchanges=[[turn.id for turn in exchange] for exchange in exchanges],
        waiting=[each.id for each in waiting],
    )
    context = Context(
        owner_id=conversation.owner_id,
        conversation_id=conversation.pk,
        message_id=message.pk,
        attempt=attempt,
        text=message.text,
        identity=refs.identity,
        facts={fact.key: fact.value for fact in facts},
        handoff=handoff_note(handoff),
        task_checkpoint=plan.plan_output if plan else {},
        summary=summary.text if summary else "",
        history=[Turn(turn.role, turn.text) for exchange in exchanges for turn in exchange],
        waiting=[Turn(each.role, each.text) for each in waiting],
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
        exchanges=[[pk] for pk in run_context.turns],  # flattened again by `turns`
        waiting=run_context.waiting,
    )


def context_load(*, refs: ContextRefs, message: Message, attempt: int) -> Context:
    by_id = Message.objects.in_bulk([*refs.turns, *refs.waiting])
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
        waiting=[Turn(by_id[pk].role, by_id[pk].text) for pk in refs.waiting if pk in by_id],
    )


def run_context_store(*, run: Run, refs: ContextRefs, tokens: int) -> RunContext:
    """The last write of the caller's fenced transaction (it holds the run's lock), which
    commits with it (`store.round_trip`)."""
    stored = contexts.run_context_insert(
        run_id=run.pk,
        identity=refs.identity,
        facts=refs.facts,
        handoff_id=refs.handoff_id,
        checkpoint_id=refs.checkpoint_id,
        summary_id=refs.summary_id,
        turns=refs.turns,
        waiting=refs.waiting,
        estimated_tokens=tokens,
    )
    return store.round_trip(stored, commit=True)[stored]


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
    parts += [turn_line(turn) for turn in context.waiting] or ["(none)"]
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
        + len(run_context.waiting)
        - len(context.history)
        - len(context.waiting)
    ):
        gone.append(f"{missing} message(s) deleted since")
    header = f"Estimated tokens: {run_context.estimated_tokens}"
    if gone:
        header += f" (not shown: {'; '.join(gone)})"
    return f"{header}\n\n{context_text(context)}"
