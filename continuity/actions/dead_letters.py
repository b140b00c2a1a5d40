"""What staff (and a message's owner) do with a message that could not be processed: ask it
again (as it was, or corrected), replace it by the person's edit, or discard it. (Setting it
aside is the engine's: `delivery.dead_letters`.)"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from ..delivery.audit import staff_action_record
from ..delivery.inbox import message_bump, message_clean_text, message_queue
from ..errors import InvalidMessage, InvalidTransition
from ..live.events import publish_message_changed
from ..models import Alert, DeadLetter, Message, StaffAction

logger = logging.getLogger(__name__)


def dead_letter_lock(dead_letter_id: int) -> DeadLetter:
    """Inside a transaction: the dead letter, locked, if staff have not dealt with it yet."""
    dead_letter = (
        DeadLetter.objects.select_for_update().select_related("message").get(pk=dead_letter_id)
    )
    if dead_letter.status != DeadLetter.Status.PENDING:
        raise InvalidTransition(
            f"Dead letter {dead_letter.pk} was already {dead_letter.get_status_display().lower()}."
        )
    return dead_letter


@transaction.atomic
def dead_letter_retry(
    *, dead_letter: DeadLetter, by, reason: str = "", text: str | None = None
) -> Message:
    """Ask the message again, as a new message at the end of its conversation.

    Not back in its old place: later messages were answered without it, so answering it there
    would put a reply above replies that were written before it. The new message has a fresh
    attempt budget and no checkpoints, and its context holds everything said since. `text`
    corrects the message (edit and retry); the original stays in the dead letter and the audit.
    """
    dead_letter = dead_letter_lock(dead_letter.pk)
    original = dead_letter.message
    if original.hidden_with_id is not None:
        raise InvalidTransition(
            f"Dead letter {dead_letter.pk}: its message is on a branch its owner no longer shows "
            "(they edited or regenerated an earlier message): asked again, it would be answered "
            "after messages it never saw. Discard it instead."
        )
    if by == dead_letter.owner and owner_retried_before(original):
        raise InvalidTransition(
            f"Dead letter {dead_letter.pk}: this message failed again after its owner retried "
            "it once; it is left for staff to review."
        )
    edited = text is not None and text.split() != original.text.split()
    new_text = message_clean_text(text) if edited else original.text
    reask = message_queue(
        conversation_id=original.conversation_id, text=new_text, reasked_from_id=original.pk
    )
    DeadLetter.objects.filter(pk=dead_letter.pk).update(
        status=DeadLetter.Status.RETRIED,
        retried_as=reask,
        resolved_at=timezone.now(),
        resolved_by=by,
    )
    staff_action_record(
        kind=StaffAction.Kind.EDIT_AND_RETRY if edited else StaffAction.Kind.RETRY,
        by=by,
        reason=reason,
        dead_letter=dead_letter,
        conversation_id=original.conversation_id,
        details={"original_text": original.text, "text": new_text, "message_id": reask.pk},
    )
    dead_letter_alert_clear(dead_letter=dead_letter, by=by)
    dead_letter_show_outcome(original)
    logger.info("Dead letter %s retried by %s as message %s", dead_letter.pk, by, reask.pk)
    return reask


def dead_letter_replace(*, message_id: int, by, edit: Message) -> None:
    """The person edited a message that could not be processed: its edit is asked instead, and
    its dead letter, if still waiting for staff, is resolved as replaced."""
    replaced = DeadLetter.objects.filter(message_id=message_id, status=DeadLetter.Status.PENDING)
    dead_letter = replaced.select_for_update().first()
    if dead_letter is None:
        return
    replaced.update(status=DeadLetter.Status.REPLACED, resolved_at=timezone.now(), resolved_by=by)
    dead_letter_alert_clear(dead_letter=dead_letter, by=by)
    staff_action_record(
        kind=StaffAction.Kind.REPLACED_BY_EDIT,
        by=by,
        reason="The person edited the message; the edit is asked instead.",
        dead_letter=dead_letter,
        conversation_id=dead_letter.conversation_id,
        details={
            "original_text": dead_letter.message.text,
            "text": edit.text,
            "message_id": edit.pk,
        },
    )
    logger.info("Dead letter %s replaced by its owner's edit %s", dead_letter.pk, edit.pk)


@transaction.atomic
def dead_letter_discard(*, dead_letter: DeadLetter, by, reason: str) -> None:
    """Close the dead letter without answering the message; the user sees it was discarded."""
    if not reason.strip():
        raise InvalidMessage("Say why the message is discarded: the reason goes in the audit log.")
    dead_letter = dead_letter_lock(dead_letter.pk)
    DeadLetter.objects.filter(pk=dead_letter.pk).update(
        status=DeadLetter.Status.DISCARDED, resolved_at=timezone.now(), resolved_by=by
    )
    staff_action_record(
        kind=StaffAction.Kind.DISCARD,
        by=by,
        reason=reason,
        dead_letter=dead_letter,
        conversation_id=dead_letter.conversation_id,
    )
    dead_letter_alert_clear(dead_letter=dead_letter, by=by)
    dead_letter_show_outcome(dead_letter.message)
    logger.info("Dead letter %s discarded by %s: %s", dead_letter.pk, by, reason)


def dead_letter_alert_clear(*, dead_letter: DeadLetter, by) -> None:
    """A dead letter dealt with (retried, discarded, replaced by its owner's edit) is no longer
    something to be alerted to."""
    Alert.objects.filter(dead_letter=dead_letter, acknowledged_at__isnull=True).update(
        acknowledged_at=timezone.now(), acknowledged_by=by
    )


def owner_retried_before(message: Message) -> bool:
    """Whether `message` is its owner's own re-ask of an earlier dead message: a second failure
    is left to staff, so a message that crashes workers costs at most two rounds of attempts
    before a person looks at it."""
    return (
        message.reasked_from_id is not None
        and DeadLetter.objects.filter(
            message_id=message.reasked_from_id, resolved_by_id=message.conversation.owner_id
        ).exists()
    )


def dead_letter_show_outcome(message: Message) -> None:
    """Re-render the dead message on its owner's open pages: the notice under it changes."""
    message_bump(message_id=message.pk)
    transaction.on_commit(
        lambda: publish_message_changed(
            conversation_id=message.conversation_id, message_id=message.pk
        )
    )


def dead_letters_retry(*, dead_letters, by, reason: str = "") -> tuple[int, list[str]]:
    """Retry each (in the order their messages were sent, so re-asks keep that order); one
    transaction each. Returns how many were retried and why the others were not."""
    return each_dead_letter(
        dead_letters, lambda item: dead_letter_retry(dead_letter=item, by=by, reason=reason)
    )


def dead_letters_discard(*, dead_letters, by, reason: str) -> tuple[int, list[str]]:
    if not reason.strip():
        raise InvalidMessage(
            "Say why the messages are discarded: the reason goes in the audit log."
        )
    return each_dead_letter(
        dead_letters, lambda item: dead_letter_discard(dead_letter=item, by=by, reason=reason)
    )


def each_dead_letter(dead_letters, action) -> tuple[int, list[str]]:
    done, problems = 0, []
    for dead_letter in sorted(dead_letters, key=lambda item: item.message_id):
        try:
            action(dead_letter)
            done += 1
        except (InvalidTransition, InvalidMessage) as error:
            problems.append(str(error))
    return done, problems
