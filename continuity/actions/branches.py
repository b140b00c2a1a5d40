"""Versions and branches: editing a sent message or regenerating the last
reply asks again from that point as a new version, on a new branch; the old branch is kept and
can be shown again.

The shown branch is the messages whose `hidden_with` is empty; it is one path through the
tree, and along a path the questions' ids only grow, so "the shown branch after question M" is
every shown question with an id from M's on, with their replies (a reply's id says only when it
was written: after a burst of questions, the first reply comes after the last question). Hiding
a version stamps its part of the shown branch with that version (`hidden_with`); showing it
again clears exactly those stamps. Nothing is deleted, and
a new version is an ordinary queued message at the end of the conversation, answered by the
same pipeline with its own attempts and checkpoints.
"""

from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.db.models import F, Q

from ..context.handoffs import handoffs_carry
from ..delivery.attempts.lease import waiting_messages
from ..delivery.attempts.locking import conversation_lock
from ..delivery.inbox import message_clean_text, message_queue, same_text_or_refuse
from ..errors import ClientIdReused, InvalidTransition
from ..live.events import publish_branch_changed
from ..models import Conversation, Message
from .dead_letters import dead_letter_replace

logger = logging.getLogger(__name__)
BUSY = "Wait until the reply is finished (or stop it) before changing the conversation."
WITH_SUPPORT = (
    "Support is answering your messages here: wait for their answer, or for the assistant to be "
    "back, before changing the conversation."
)


def busy_refusal(conversation_id: int) -> InvalidTransition:
    taken_over = Conversation.objects.filter(
        pk=conversation_id, state=Conversation.State.TAKEN_OVER
    ).exists()
    return InvalidTransition(WITH_SUPPORT if taken_over else BUSY)


def message_edit(*, message: Message, text: str, client_id: uuid.UUID, by=None) -> Message:
    """Send an edited version of `message` as a new branch from that point. A message that
    could not be processed is replaced by its edit: its dead letter is resolved so ("replaced by
    the person's edit", in the audit log), and staff no longer re-ask it."""
    with transaction.atomic():
        added = version_add(message=message, text=message_clean_text(text), client_id=client_id)
        if by is not None:
            dead_letter_replace(message_id=message.pk, by=by, edit=added)
    return added


def reply_regenerate(*, message: Message, client_id: uuid.UUID) -> Message:
    """Ask the last message again for another reply; the earlier reply stays as a version."""
    return version_add(message=message, text=message.text, client_id=client_id, last_only=True)


def version_add(
    *, message: Message, text: str, client_id: uuid.UUID, last_only: bool = False
) -> Message:
    """A new version of `message` at the end of the conversation, its branch shown instead of
    the one from `message` on. A resubmitted form (same client id) returns the stored version."""
    with transaction.atomic():
        conversation_lock(message.conversation_id)
        current = Message.objects.get(pk=message.pk)
        root = current.version_of_id or current.pk
        resubmitted = Message.objects.filter(
            conversation_id=current.conversation_id, client_id=client_id
        ).first()
        if resubmitted is not None:
            if resubmitted.version_of_id != root:
                raise ClientIdReused("This form was already used for another message.")
            return same_text_or_refuse(resubmitted, text)
        if current.hidden_with_id is not None:
            raise InvalidTransition("This message is on a branch that is no longer shown.")
        if waiting_messages(current.conversation_id).exists():
            raise busy_refusal(current.conversation_id)
        last = shown_user_messages(current.conversation_id).order_by("-id").first()
        if last_only and last != current:
            raise InvalidTransition("Only the last reply can be regenerated.")
        changed = branch_hide(version=current)
        added = message_queue(
            conversation_id=current.conversation_id,
            text=text,
            client_id=client_id,
            version_of_id=root,
        )
        handoffs_carry(conversation_id=current.conversation_id, left=changed)
        transaction.on_commit(
            lambda: publish_branch_changed(
                conversation_id=current.conversation_id, message_ids=changed
            )
        )
    logger.info("Message %s: version %s added on a new branch", current.pk, added.pk)
    return added


def version_show(*, message: Message) -> None:
    """Show `message`'s branch instead of the version of it that is shown now."""
    with transaction.atomic():
        conversation_lock(message.conversation_id)
        current = Message.objects.get(pk=message.pk)
        if current.hidden_with_id is None:
            return  # already shown: a double click, or another tab did it
        root = current.version_of_id or current.pk
        shown = (
            Message.objects.shown()
            .filter(Q(pk=root) | Q(version_of_id=root))
            .exclude(pk=current.pk)
            .first()
        )
        if shown is None or current.hidden_with_id != current.pk:
            raise InvalidTransition("This version is on a branch that is not shown.")
        if waiting_messages(message.conversation_id).exists():
            raise busy_refusal(message.conversation_id)
        left = branch_hide(version=shown)
        revealed = Message.objects.filter(hidden_with=current)
        changed = left + list(revealed.filter(role=Message.Role.USER).values_list("pk", flat=True))
        revealed.update(hidden_with=None, version=F("version") + 1)
        handoffs_carry(conversation_id=message.conversation_id, left=left)
        transaction.on_commit(
            lambda: publish_branch_changed(
                conversation_id=message.conversation_id, message_ids=changed
            )
        )


def branch_hide(*, version: Message) -> list[int]:
    """Hide the shown branch from `version` on, stamped with it: the questions from it on, and
    their replies; the hidden questions' ids. Versions are bumped so that open pages replace
    what they show."""
    questions = shown_user_messages(version.conversation_id).filter(id__gte=version.pk)
    changed = list(questions.values_list("pk", flat=True))
    Message.objects.shown().filter(Q(pk__in=changed) | Q(reply_to_id__in=changed)).update(
        hidden_with=version, version=F("version") + 1
    )
    Conversation.objects.filter(pk=version.conversation_id).update(
        branch_changes=F("branch_changes") + 1
    )
    return changed


def shown_user_messages(conversation_id: int):
    return Message.objects.shown().filter(conversation_id=conversation_id, role=Message.Role.USER)
