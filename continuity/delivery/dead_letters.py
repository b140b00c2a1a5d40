"""Input isolation: a message that cannot be processed is set aside with everything staff need."""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from ..live.events import publish_message_changed
from ..models import Alert, Conversation, CrashRecord, DeadLetter, Message, Run
from .alerts import alert_mail
from .drains import conversation_enqueue
from .inbox import message_bump

logger = logging.getLogger(__name__)


def attempts_snapshot(message: Message) -> list[dict]:
    return [
        {
            "attempt": run.attempt,
            "state": run.state,
            "worker": run.worker,
            "started_at": run.started_at.isoformat(),
            "ended_at": run.ended_at.isoformat() if run.ended_at else None,
            "heartbeat_at": run.heartbeat_at.isoformat(),
            "error": run.error,
            "traceback": run.traceback,
        }
        for run in message.runs.order_by("id")
    ]


@transaction.atomic
def dead_letter_create(*, message: Message, reason: str) -> DeadLetter:
    """Mark the message dead, record why, tell staff, and let the conversation go on."""
    conversation = message.conversation
    # One dead letter per message, whichever path gave up on it last.
    dead_letter, _ = DeadLetter.objects.update_or_create(
        message=message,
        defaults={
            "conversation": conversation,
            "owner_id": conversation.owner_id,
            "payload": {
                "text": message.text,
                "client_id": str(message.client_id) if message.client_id else None,
                "created_at": message.created_at.isoformat(),
            },
            "attempts": attempts_snapshot(message),
            "reason": reason,
            "error_class": error_class_of(message),
            "status": DeadLetter.Status.PENDING,
        },
    )
    message_bump(message_id=message.pk, state=Message.State.DEAD)
    CrashRecord.objects.filter(message=message, resolved_at=None).update(resolved_at=timezone.now())
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)
    text = (
        f"Message {message.pk} of conversation {conversation.pk} dead-lettered after "
        f"{message.attempts} attempt(s): {reason}"
    )
    logger.error(text)
    # One open alert per dead letter: cleared when staff retry or discard it, or acknowledged.
    Alert.objects.filter(dead_letter=dead_letter, acknowledged_at__isnull=True).delete()
    Alert.objects.create(
        kind=Alert.Kind.DEAD_LETTER, conversation=conversation, dead_letter=dead_letter, text=text
    )
    conversation_enqueue(conversation_id=conversation.pk)
    transaction.on_commit(lambda: alert_mail(subject="Message dead-lettered", text=text))
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    )
    return dead_letter


def error_class_of(message: Message) -> str:
    """What ended the message's last attempt, for filtering: "Worker crash", "Interrupted", or
    the exception class named at the start of the error ("ValueError: …")."""
    last = message.runs.order_by("-id").first()
    if last is None:
        return ""
    if last.state == Run.State.CRASHED:
        return "Worker crash"
    if last.state == Run.State.INTERRUPTED:
        return "Interrupted"
    head = last.error.split(":", 1)[0].strip()
    return head if head.isidentifier() else "Error"
