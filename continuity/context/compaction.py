"""Compaction: when the assembled context passes CONTINUITY_COMPACT_AT of the token budget,
the turns older than the last CONTINUITY_HISTORY_TURNS are summarized by the active brain into
a new `Summary` version. The messages stay for display and audit; they only leave the prompt.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.db.models import Max

from ..brains import Turn
from ..models import Conversation, Message, Run, Summary
from .assembly import ContextRefs
from .handoffs import handoff_for_compaction
from .tokens import compaction_threshold


def compaction_candidates(*, refs: ContextRefs, tokens: int) -> list[list[int]]:
    """The turns to summarize now: none below the threshold; else all but the last N."""
    keep = settings.CONTINUITY_HISTORY_TURNS
    if tokens <= compaction_threshold() or len(refs.pairs) <= keep:
        return []
    return refs.pairs[: len(refs.pairs) - keep]


def turns_of(pairs: list[list[int]]) -> list[Turn]:
    ids = [pk for pair in pairs for pk in pair]
    rows = Message.objects.filter(pk__in=ids).order_by("id").values_list("role", "text")
    return [Turn(role, text) for role, text in rows]


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
        list(Conversation.objects.select_for_update().filter(pk=conversation_id).values("pk"))
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
    *, conversation_id: int, covers_through_id: int, text: str, run: Run | None
) -> Summary:
    """The brain's summary, and a handoff that says the history was compacted."""
    with transaction.atomic():
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
