"""Handoffs: versioned, human-readable working memory of a conversation (seed 000's format).

Written by the engine at the end of a turn whose task state changed, at a planned shutdown,
after a crash, at a pause and at a compaction; by staff in the admin. Never overwritten.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max

from .. import sql
from ..brains import HandoffNote
from ..models import Conversation, Handoff, Run, sections_lines

SECTIONS = ("current_state", "critical_context", "next_steps", "decisions")


HANDOFF_COLUMNS = (
    "id",
    "conversation_id",
    "version",
    "reason",
    *SECTIONS,
    "author_id",
    "run_id",
    "created_at",
)


def handoff_latest(*, conversation_id: int) -> Handoff | None:
    """The newest handoff of the shown branch: one written at the end of a turn that is now on
    a hidden branch (the conversation was edited before it) describes a state left behind."""
    return handoff_of(sql.rows(*handoff_latest_statement(conversation_id=conversation_id)))


def handoff_latest_statement(*, conversation_id: int) -> sql.Statement:
    return (
        f"SELECT {', '.join('h.' + column for column in HANDOFF_COLUMNS)} "
        "FROM continuity_handoff AS h LEFT JOIN continuity_run AS r ON r.id = h.run_id "
        "LEFT JOIN continuity_message AS m ON m.id = r.message_id "
        "WHERE h.conversation_id = %s AND (h.run_id IS NULL OR m.hidden_with_id IS NULL) "
        "ORDER BY h.version DESC LIMIT 1",
        [conversation_id],
    )


def handoff_of(found: list[tuple]) -> Handoff | None:
    if not found:
        return None
    values = dict(zip(HANDOFF_COLUMNS, found[0], strict=True))
    values["created_at"] = sql.datetime_value(values["created_at"])
    return sql.instance(Handoff, **values)


def section_text(value: str | list[str]) -> str:
    if isinstance(value, list | tuple):
        return "\n".join(str(item).strip() for item in value if str(item).strip())
    return str(value).strip()


def handoff_sections(handoff: Handoff | None) -> dict[str, str]:
    if handoff is None:
        return dict.fromkeys(SECTIONS, "")
    return {name: getattr(handoff, name) for name in SECTIONS}


def handoff_write(
    *,
    conversation_id: int,
    reason: str,
    sections: dict,
    author=None,
    run: Run | None = None,
) -> Handoff:
    """Add the next version. The conversation row is locked (the engine's first lock in every
    transaction, so no deadlock), hence two writers never pick the same version number."""
    with transaction.atomic():
        list(Conversation.objects.select_for_update().filter(pk=conversation_id).values("pk"))
        texts = {name: section_text(sections.get(name, "")) for name in SECTIONS}
        newest = Handoff.objects.filter(conversation_id=conversation_id).aggregate(v=Max("version"))
        return Handoff.objects.create(
            conversation_id=conversation_id,
            version=(newest["v"] or 0) + 1,
            reason=reason,
            author=author,
            run=run,
            **texts,
        )


INTERRUPTED = "Interrupted while answering:"
ANSWER_INTERRUPTED = "Answer the interrupted message:"


def without_interruption(text: str) -> str:
    """The section without the lines an interruption added (they are only true until the
    interrupted message is answered)."""
    return section_text(
        [
            line
            for line in text.splitlines()
            if not line.startswith((INTERRUPTED, ANSWER_INTERRUPTED))
        ]
    )


def handoff_after_interruption(*, run: Run, reason: str) -> Handoff:
    """The newest handoff plus what was in progress when the attempt stopped."""
    sections = handoff_sections(handoff_latest(conversation_id=run.conversation_id))
    asked = clip(run.message.text)
    what = Handoff.Reason(reason).label.lower()
    sections["current_state"] = section_text(
        [
            f"{INTERRUPTED} “{asked}” ({what}, attempt {run.attempt}).",
            without_interruption(sections["current_state"]),
        ]
    )
    sections["next_steps"] = section_text(
        [f"{ANSWER_INTERRUPTED} “{asked}”", without_interruption(sections["next_steps"])]
    )
    return handoff_write(
        conversation_id=run.conversation_id, reason=reason, sections=sections, run=run
    )


def handoff_after_turn(
    *, run: Run, task_state: dict | None, latest: Handoff | None
) -> Handoff | None:
    """End of a turn: a new version when the brain reports a changed task state, or when the
    newest handoff (`latest`, read under the conversation's lock, which the caller holds)
    still describes an interruption that this turn has now answered; nothing when the
    sections would be the same."""
    sections = handoff_sections(latest)
    if task_state:
        sections.update({name: task_state[name] for name in SECTIONS if name in task_state})
    sections = {name: without_interruption(section_text(text)) for name, text in sections.items()}
    if (latest is None and not task_state) or sections == handoff_sections(latest):
        return None
    return handoff_write(
        conversation_id=run.conversation_id,
        reason=Handoff.Reason.END_OF_TURN,
        sections=sections,
        run=run,
    )


def handoff_for_pause(*, conversation: Conversation, reason: str) -> Handoff:
    sections = handoff_sections(handoff_latest(conversation_id=conversation.pk))
    sections["current_state"] = section_text([f"Paused: {reason}", sections["current_state"]])
    sections["next_steps"] = section_text(
        ["Wait for staff to resume the conversation", sections["next_steps"]]
    )
    return handoff_write(
        conversation_id=conversation.pk, reason=Handoff.Reason.PAUSE, sections=sections
    )


def handoff_for_compaction(*, conversation_id: int, summary_version: int, run: Run | None):
    sections = handoff_sections(handoff_latest(conversation_id=conversation_id))
    note = f"Earlier turns were compacted into summary v{summary_version}."
    state = [
        line for line in sections["current_state"].splitlines() if "compacted into" not in line
    ]
    sections["current_state"] = section_text([*state, note])
    return handoff_write(
        conversation_id=conversation_id,
        reason=Handoff.Reason.COMPACTION,
        sections=sections,
        run=run,
    )


def handoff_note(handoff: Handoff | None) -> HandoffNote | None:
    if handoff is None:
        return None
    return HandoffNote(
        version=handoff.version,
        reason=handoff.reason,
        written_at=handoff.created_at,
        current_state=handoff.current_state,
        critical_context=sections_lines(handoff.critical_context),
        next_steps=sections_lines(handoff.next_steps),
        decisions=sections_lines(handoff.decisions),
    )


def clip(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
