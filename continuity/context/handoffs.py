"""Handoffs: versioned, human-readable working memory of a conversation (docs/design.md,
"Handoffs").

Written by the engine after a reply whose exchange changed the task state, at a planned shutdown,
after a crash, at a pause and at a compaction; by staff in the admin. Never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction
from django.db.models import Max

from .. import store
from ..brains import ANSWER_INTERRUPTED, HandoffNote
from ..models import Conversation, Handoff, Message, Run, sections_lines
from ..store import contexts
from ..words import clip

SECTIONS = Handoff.SECTIONS


def handoff_latest(*, conversation_id: int) -> Handoff | None:
    """The newest handoff of the shown branch (`store.contexts.handoff_latest`)."""
    return store.execute(contexts.handoff_latest(conversation_id=conversation_id))


def section_text(value: str | list[str]) -> str:
    if isinstance(value, list | tuple):
        return "\n".join(str(item).strip() for item in value if str(item).strip())
    return str(value).strip()


def handoff_sections(handoff: Handoff | None) -> dict[str, str]:
    if handoff is None:
        return dict.fromkeys(SECTIONS, "")
    return {name: getattr(handoff, name) for name in SECTIONS}


def conversation_row_lock(conversation_id: int) -> None:
    """Lock the conversation's row: the engine's first lock in every transaction that writes
    its versioned rows (handoffs, summaries), so no two writers pick one version number."""
    list(Conversation.objects.select_for_update().filter(pk=conversation_id).values("pk"))


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
        conversation_row_lock(conversation_id)
        return handoff_create(
            conversation_id=conversation_id,
            reason=reason,
            sections=sections,
            author=author,
            run=run,
        )


def handoff_create(
    *,
    conversation_id: int,
    reason: str,
    sections: dict,
    author=None,
    run: Run | None = None,
    based_on: Handoff | None = None,
) -> Handoff:
    """The next version, under the conversation's lock, which the caller holds. One written
    outside an attempt is placed on the branch shown (`Handoff.at_message`), made from
    `based_on` (by default the newest version of that branch)."""
    texts = {name: section_text(sections.get(name, "")) for name in SECTIONS}
    newest = Handoff.objects.filter(conversation_id=conversation_id).aggregate(v=Max("version"))
    placed = {}
    if run is None:
        placed = {
            "at_message_id": newest_question_id(conversation_id),
            "based_on": based_on or handoff_latest(conversation_id=conversation_id),
        }
    return Handoff.objects.create(
        conversation_id=conversation_id,
        version=(newest["v"] or 0) + 1,
        reason=reason,
        author=author,
        run=run,
        **placed,
        **texts,
    )


def newest_question_id(conversation_id: int) -> int | None:
    shown = Message.objects.shown().filter(conversation_id=conversation_id, role=Message.Role.USER)
    return shown.order_by("-id").values_list("pk", flat=True).first()


def handoffs_carry(*, conversation_id: int, left: list[int]) -> None:
    """The branch from question `left[0]` on was left for another (an edit, a regenerate, another
    version shown): what was written outside an attempt on it (a correction, a staff edit, a
    forget, a hand-back) happened to the conversation, not to that branch's replies, so each
    such version's own changes are applied again, in order, onto the newest version of the
    branch now shown. Its goal and plan, written by its replies, stay with it. The caller holds
    the conversation's lock."""
    written = (
        Handoff.objects.filter(
            conversation_id=conversation_id, run__isnull=True, at_message_id__in=left
        )
        .exclude(reason=Handoff.Reason.COMPACTION)  # names a summary of the branch left
        .select_related("based_on")
    )
    for version in written.order_by("version"):
        changes = handoff_changes(handoff_note(version.based_on), handoff_sections(version))
        if changes:
            handoff_revise(
                conversation_id=conversation_id,
                reason=version.reason,
                edit=lambda sections, changes=changes: changes_apply(sections, changes),
                author=version.author,
            )


def handoff_revise(
    *,
    conversation_id: int,
    reason: str,
    edit: Callable[[dict[str, str]], dict[str, str]],
    author=None,
    run: Run | None = None,
) -> Handoff | None:
    """A new version made by `edit` from the newest, read under the conversation's lock: what
    anyone wrote since (a correction, a staff edit, a reply's end) is never lost. None when the
    edit changed nothing."""
    with transaction.atomic():
        conversation_row_lock(conversation_id)
        latest = handoff_latest(conversation_id=conversation_id)
        before = handoff_sections(latest)
        sections = {name: section_text(text) for name, text in edit(dict(before)).items()}
        if sections == {name: section_text(text) for name, text in before.items()}:
            return None
        return handoff_create(
            conversation_id=conversation_id,
            reason=reason,
            sections=sections,
            author=author,
            run=run,
            based_on=latest,
        )


def handoff_changes(before: HandoffNote | None, after: dict | None) -> dict | None:
    """What an exchange changed in its conversation's handoff: `after` (the task state the brain
    reports, whole sections) against `before` (the handoff the exchange began with), line by line.
    Only these are applied at the reply's end, onto the newest version: the reply never writes
    back lines it merely read, so what changed meanwhile stays."""
    if not after:
        return None
    began = note_sections(before)
    changes = {}
    for name in SECTIONS:
        if name not in after:
            continue
        old, new = sections_lines(began[name]), sections_lines(section_text(after[name]))
        added = [line for line in new if line not in old]
        removed = [line for line in old if line not in new]
        if added or removed:
            changes[name] = {"added": added, "removed": removed}
    return changes or None


def changes_apply(sections: dict[str, str], changes: dict) -> dict[str, str]:
    """`changes` (from `handoff_changes`) onto `sections`: lines removed go, lines added come
    first in the next steps (a new plan leads) and last elsewhere, each once."""
    merged = dict(sections)
    for name, change in changes.items():
        kept = [line for line in sections_lines(sections[name]) if line not in change["removed"]]
        added = [line for line in change["added"] if line not in kept]
        merged[name] = "\n".join([*added, *kept] if name == "next_steps" else [*kept, *added])
    return merged


def note_sections(note: HandoffNote | None) -> dict[str, str]:
    if note is None:
        return dict.fromkeys(SECTIONS, "")
    return {
        "current_state": note.current_state,
        "critical_context": "\n".join(note.critical_context),
        "next_steps": "\n".join(note.next_steps),
        "decisions": "\n".join(note.decisions),
    }


INTERRUPTED = "Interrupted while answering:"


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
    asked = clip(run.message.text, 100)
    what = Handoff.Reason(reason).label.lower()

    def edit(sections: dict[str, str]) -> dict[str, str]:
        sections["current_state"] = section_text(
            [
                f"{INTERRUPTED} “{asked}” ({what}, attempt {run.attempt}).",
                without_interruption(sections["current_state"]),
            ]
        )
        sections["next_steps"] = section_text(
            [f"{ANSWER_INTERRUPTED} “{asked}”", without_interruption(sections["next_steps"])]
        )
        return sections

    return handoff_revise(
        conversation_id=run.conversation_id, reason=reason, edit=edit, run=run
    ) or handoff_latest(conversation_id=run.conversation_id)


def handoff_after_reply(
    *, run: Run, changes: dict | None, latest: Handoff | None
) -> Handoff | None:
    """After a reply: a new version when the exchange changed the task state (`changes`, from
    `handoff_changes`: applied onto `latest`, the newest version, read under the
    conversation's lock, which the caller holds), or when the newest still describes an
    interruption that this reply has now answered; nothing when the sections would be the
    same."""
    sections = handoff_sections(latest)
    if changes:
        sections = changes_apply(sections, changes)
    sections = {name: without_interruption(section_text(text)) for name, text in sections.items()}
    if (latest is None and not changes) or sections == handoff_sections(latest):
        return None
    return handoff_create(
        conversation_id=run.conversation_id,
        reason=Handoff.Reason.AFTER_REPLY,
        sections=sections,
        run=run,
    )


def handoff_for_pause(*, conversation: Conversation, reason: str) -> Handoff:
    def edit(sections: dict[str, str]) -> dict[str, str]:
        sections["current_state"] = section_text([f"Paused: {reason}", sections["current_state"]])
        sections["next_steps"] = section_text(
            ["Wait for staff to resume the conversation", sections["next_steps"]]
        )
        return sections

    return handoff_revise(
        conversation_id=conversation.pk, reason=Handoff.Reason.PAUSE, edit=edit
    ) or handoff_latest(conversation_id=conversation.pk)


def handoff_for_compaction(*, conversation_id: int, summary_version: int, run: Run | None):
    note = f"Earlier turns were compacted into summary v{summary_version}."

    def edit(sections: dict[str, str]) -> dict[str, str]:
        state = [
            line for line in sections["current_state"].splitlines() if "compacted into" not in line
        ]
        sections["current_state"] = section_text([*state, note])
        return sections

    return handoff_revise(
        conversation_id=conversation_id, reason=Handoff.Reason.COMPACTION, edit=edit, run=run
    ) or handoff_latest(conversation_id=conversation_id)


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


def handoff_forget_line(*, conversation_id: int, section: str, line: str, author) -> bool:
    """The person forgets one line of their conversation's notes: a new version without it
    ("Forgotten by the user"). False when the newest version no longer has it."""

    def edit(sections: dict[str, str]) -> dict[str, str]:
        kept = [kept for kept in sections_lines(sections[section]) if kept != line.strip()]
        return {**sections, section: "\n".join(kept)}

    return (
        handoff_revise(
            conversation_id=conversation_id,
            reason=Handoff.Reason.FORGOTTEN,
            edit=edit,
            author=author,
        )
        is not None
    )


def handoff_correct(*, conversation_id: int, text: str, author) -> Handoff:
    """The user's correction goes into the critical context of the next attempt's handoff, added
    to the newest version under the conversation's lock (a reply ending meanwhile keeps it)."""
    line = f"Correction from the user: {' '.join(text.split())}"

    def edit(sections: dict[str, str]) -> dict[str, str]:
        sections["critical_context"] = section_text([sections["critical_context"], line])
        return sections

    return handoff_revise(
        conversation_id=conversation_id,
        reason=Handoff.Reason.USER_CORRECTION,
        edit=edit,
        author=author,
    ) or handoff_latest(conversation_id=conversation_id)
