"""Compaction: when the assembled context passes CONTINUITY_COMPACT_AT of the token budget,
the exchanges older than the last CONTINUITY_HISTORY_EXCHANGES are summarized by the active
brain into a new `Summary` version, and more of the oldest, down to the newest exchange, while
what stays would still pass it: by tokens, whatever the number of exchanges. The summary keeps
within its share of the budget (`summary_bounded`). The messages stay for display and audit;
they only leave the prompt.
"""

from __future__ import annotations

import re
from dataclasses import replace

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from ..brains import Context, Turn
from ..models import Message, Run, Summary
from .assembly import ContextRefs, context_text, summary_latest, turn_line
from .handoffs import conversation_row_lock, handoff_for_compaction
from .tokens import compaction_threshold, tokens_estimate


def compaction_candidates(
    *, refs: ContextRefs, context: Context, tokens: int, budget: int | None = None
) -> list[list[int]]:
    """The exchanges to summarize now, oldest first: none while the context's `tokens` are
    within the threshold of `budget` (default CONTINUITY_CONTEXT_TOKENS); past it, all but the
    last CONTINUITY_HISTORY_EXCHANGES, and more of the oldest while the rest would still pass it,
    down to the newest exchange."""
    threshold = compaction_threshold(budget)
    if tokens <= threshold:
        return []
    sizes = exchange_tokens(refs, context)
    keep = min(settings.CONTINUITY_HISTORY_EXCHANGES, len(refs.exchanges))
    staying = tokens - sum(sizes[: len(sizes) - keep])
    while keep > 1 and staying > threshold:
        staying -= sizes[len(sizes) - keep]
        keep -= 1
    return refs.exchanges[: len(refs.exchanges) - keep]


def exchange_tokens(refs: ContextRefs, context: Context) -> list[int]:
    """The estimated tokens of each exchange of `refs.exchanges`, as the context renders it."""
    sizes, start = [], 0
    for exchange in refs.exchanges:
        turns = context.history[start : start + len(exchange)]
        sizes.append(tokens_estimate("\n".join(turn_line(turn) for turn in turns)))
        start += len(exchange)
    return sizes


def exchanges_forgotten(exchanges: list[list[int]]) -> bool:
    """Whether the person forgot a fact one of these exchanges stated, since they were read."""
    ids = [pk for exchange in exchanges for pk in exchange]
    return Message.objects.filter(pk__in=ids, forgotten_at__isnull=False).exists()


def turns_of(exchanges: list[list[int]]) -> list[Turn]:
    ids = [pk for exchange in exchanges for pk in exchange]
    rows = Message.objects.filter(pk__in=ids).order_by("id").values_list("role", "text")
    return [Turn(role, text) for role, text in rows]


# The first line of a summary whose oldest points were dropped to keep it within its share.
POINTS_DROPPED = "(Older points were dropped to keep this summary within its budget.)"
# Where a sentence ends: after its stop and the space that follows, or at a line's end.
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def summary_room(*, context: Context, older: list[list[int]], budget: int) -> int:
    """The tokens the summary replacing `older` may take: its share of `budget`
    (CONTINUITY_SUMMARY_SHARE), and no more than the compaction threshold leaves once what
    compaction cannot shorten (identity, memory, notes, the exchanges it keeps) is counted."""
    kept = replace(context, summary="", history=context.history[sum(len(each) for each in older) :])
    left = compaction_threshold(budget) - tokens_estimate(context_text(kept))
    return max(min(int(budget * settings.CONTINUITY_SUMMARY_SHARE), left), 1)


def summary_bounded(text: str, *, limit: int, previous: str) -> str:
    """The brain's summary within `limit` tokens (`summary_room`): each summary is made from
    the one before, so without a bound it grows until the context passes its budget and no
    compaction can shorten it (with a model brain, every later message would then be
    dead-lettered). Past it, its oldest points (lines; sentences, for one paragraph) are
    dropped, and its first line says so, as it does in every later summary made from one that
    lost points (`previous`); the newest points are kept."""
    points = [line for line in text.splitlines() if line.strip() and line != POINTS_DROPPED]
    dropped = previous.startswith(POINTS_DROPPED)
    if tokens_estimate("\n".join([POINTS_DROPPED, *points] if dropped else points)) <= limit:
        return "\n".join([POINTS_DROPPED, *points]) if dropped else text
    if len(points) == 1:
        points = SENTENCE_END.split(points[0])
    while len(points) > 1 and tokens_estimate("\n".join([POINTS_DROPPED, *points])) > limit:
        points.pop(0)
    return "\n".join([POINTS_DROPPED, *points])


def summary_write(
    *,
    conversation_id: int,
    covers_through_id: int,
    text: str,
    author=None,
    run: Run | None = None,
) -> Summary:
    """Add the next summary version (the conversation row is locked: versions never clash)."""
    with transaction.atomic():
        conversation_row_lock(conversation_id)
        newest = Summary.objects.filter(conversation_id=conversation_id).aggregate(v=Max("version"))
        return Summary.objects.create(
            conversation_id=conversation_id,
            version=(newest["v"] or 0) + 1,
            covers_through_id=covers_through_id,
            text=text,
            author=author,
            run=run,
        )


def compaction_store(
    *,
    conversation_id: int,
    covers_through_id: int,
    text: str,
    run: Run | None,
    based_on: int | None = None,
) -> Summary | None:
    """The brain's summary, and a handoff that says the history was compacted; None, with
    nothing stored, when the newest summary is no longer `based_on` (the one the brain
    extended): staff edited it during the brain's call, and their version is not overwritten.
    The caller holds the conversation's lock."""
    with transaction.atomic():
        newest = summary_latest(conversation_id=conversation_id)
        if (newest.pk if newest else None) != based_on:
            return None
        summary = summary_write(
            conversation_id=conversation_id,
            covers_through_id=covers_through_id,
            text=text,
            run=run,
        )
        handoff_for_compaction(
            conversation_id=conversation_id, summary_version=summary.version, run=run
        )
    return summary


def summary_revise(*, summary: Summary, text: str, author) -> Summary:
    """A staff edit: a new version covering the same turns; the old version is kept."""
    return summary_write(
        conversation_id=summary.conversation_id,
        covers_through_id=summary.covers_through_id,
        text=text.strip(),
        author=author,
    )
