"""What a person or staff does to a conversation: resume a paused one, retry it now, rename,
archive, delete it, choose its brain. (The engine's own pause is `delivery.pauses`.)"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from ..delivery.audit import staff_action_record
from ..delivery.drains import conversation_enqueue
from ..errors import InvalidMessage, InvalidTransition
from ..live.events import (
    publish_conversation_changed,
    publish_conversation_deleted,
    publish_conversations_changed,
)
from ..models import Alert, Conversation, CrashRecord, Run, StaffAction

logger = logging.getLogger(__name__)


@transaction.atomic
def conversation_resume(*, conversation: Conversation, by, reason: str) -> None:
    """Let a paused conversation process its queue again, in order; its crashes stop counting
    and its open alerts are acknowledged by the same person."""
    updated = Conversation.objects.filter(
        pk=conversation.pk, state=Conversation.State.PAUSED
    ).update(state=Conversation.State.ACTIVE, paused_reason="", retry_at=None)
    if not updated:
        raise InvalidTransition(f"Conversation {conversation.pk} is not paused; cannot resume it.")
    now = timezone.now()
    CrashRecord.objects.filter(conversation=conversation, resolved_at=None).update(resolved_at=now)
    Alert.objects.filter(conversation=conversation, acknowledged_at=None).update(
        acknowledged_at=now, acknowledged_by=by
    )
    staff_action_record(
        kind=StaffAction.Kind.RESUME, by=by, reason=reason, conversation=conversation
    )
    logger.info("Conversation %s resumed by %s: %s", conversation.pk, by, reason)
    conversation_enqueue(conversation_id=conversation.pk)
    transaction.on_commit(
        lambda: publish_conversation_changed(
            conversation_id=conversation.pk, owner_id=conversation.owner_id
        )
    )


def conversations_resume(conversations, *, by, reason: str) -> tuple[int, list[str]]:
    """Resume each of these conversations (staff's bulk action): how many were, and why the
    others were not."""
    done, problems = 0, []
    for conversation in conversations:
        try:
            conversation_resume(conversation=conversation, by=by, reason=reason)
            done += 1
        except InvalidTransition as error:
            problems.append(str(error))
    return done, problems


@transaction.atomic
def conversation_retry_now(*, conversation: Conversation, by=None, reason: str = "") -> None:
    """End the backoff of an active conversation now, at its owner's request or, with `by`,
    a staff member's (audited).

    Only the wait moves: the attempt and crash counts stay, so the crash-loop breaker still
    pauses a conversation that keeps failing. Never for a paused conversation (staff resume
    those), nor while an attempt runs (there is no wait to cut short)."""
    updated = (
        Conversation.objects.filter(
            pk=conversation.pk, state=Conversation.State.ACTIVE, retry_at__gt=Now()
        )
        .exclude(runs__state=Run.State.RUNNING)
        .update(retry_at=Now())
    )
    if not updated:
        raise InvalidTransition(
            f"Conversation {conversation.pk} is not waiting to retry; nothing to retry now."
        )
    if by is not None:
        staff_action_record(
            kind=StaffAction.Kind.RETRY_NOW, by=by, reason=reason, conversation=conversation
        )
    conversation_enqueue(conversation_id=conversation.pk)
    transaction.on_commit(lambda: publish_conversation_changed(conversation_id=conversation.pk))


def conversation_rename(*, conversation: Conversation, title: str) -> None:
    title = " ".join(title.split())
    limit = Conversation._meta.get_field("title").max_length
    if not title:
        raise InvalidMessage("Type a title.")
    if len(title) > limit:
        raise InvalidMessage(f"A title has at most {limit} characters; this one has {len(title)}.")
    # Not an update of updated_at: renaming does not move the conversation up the sidebar.
    Conversation.objects.filter(pk=conversation.pk).update(title=title, titled_by_owner=True)
    conversation.title = title
    transaction.on_commit(
        lambda: publish_conversation_changed(
            conversation_id=conversation.pk, owner_id=conversation.owner_id
        )
    )


def conversation_archive(*, conversation: Conversation, archived: bool) -> None:
    """Archived conversations leave the sidebar; they are still answered and found by search."""
    Conversation.objects.filter(pk=conversation.pk).update(
        archived_at=timezone.now() if archived else None
    )
    transaction.on_commit(
        lambda: publish_conversation_changed(
            conversation_id=conversation.pk, owner_id=conversation.owner_id
        )
    )


@transaction.atomic
def conversation_delete(*, conversation: Conversation) -> None:
    """Delete the conversation and everything recorded about it. An attempt answering it at
    this moment loses its run row, so its fenced writes stop it (nothing is written back)."""
    conversation_id = conversation.pk
    Conversation.objects.select_for_update().filter(pk=conversation_id).first()
    Conversation.objects.filter(pk=conversation_id).delete()
    logger.info("Conversation %s deleted by its owner", conversation_id)
    owner_id = conversation.owner_id
    transaction.on_commit(lambda: publish_conversation_deleted(conversation_id=conversation_id))
    transaction.on_commit(lambda: publish_conversations_changed(owner_id=owner_id))


def conversation_brain_set(*, conversation: Conversation, brain: str) -> None:
    """Answer this conversation's next messages with another of the offered brains."""
    if brain not in settings.CONTINUITY_BRAIN_CHOICES:
        raise InvalidMessage(f"“{brain}” is not one of the assistants offered here.")
    Conversation.objects.filter(pk=conversation.pk).update(brain=brain)
    conversation.brain = brain


def conversation_zone_note(*, conversation: Conversation, zone: str) -> None:
    """The time zone the owner's browser named as they wrote (empty: not said): what their
    reminders' times mean. Written only when it changed."""
    if zone and zone != conversation.time_zone:
        Conversation.objects.filter(pk=conversation.pk).update(time_zone=zone)
        conversation.time_zone = zone
