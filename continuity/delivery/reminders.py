"""Reminders come due: each scheduled reminder whose time has come becomes a message from the
assistant in its conversation, once, whoever sweeps first (the watchdog, a worker's start).
The row is the only truth: a reminder due while nothing ran is delivered when something runs
again, late, and says so."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models.functions import Now

from ..database.clock import database_now
from ..live.events import publish_conversations_changed, publish_message_changed
from ..models import Conversation, Message, Reminder
from ..tools import when_said
from .attempts.locking import conversation_lock

logger = logging.getLogger(__name__)

# At most this many per sweep: a backlog after a long stop does not hold the sweep up.
DELIVERED_PER_SWEEP = 200


def reminders_deliver() -> int:
    """Deliver the reminders that are due; how many were."""
    due = list(
        Reminder.objects.filter(state=Reminder.State.SCHEDULED, due_at__lte=Now())
        .order_by("due_at", "pk")
        .values_list("pk", "conversation_id")[:DELIVERED_PER_SWEEP]
    )
    delivered = 0
    for reminder_id, conversation_id in due:
        try:
            delivered += reminder_deliver(reminder_id, conversation_id)
        except DatabaseError:  # one that cannot be written must not hold up the others
            logger.exception("Reminder %s not delivered", reminder_id)
    if delivered:
        logger.info("%s reminder(s) delivered", delivered)
    return delivered


def reminder_deliver(reminder_id: int, conversation_id: int) -> bool:
    """The reminder as the assistant's message, fenced on it still being scheduled: two
    sweeps at once deliver it once. Whether this one did."""
    with transaction.atomic():
        conversation_lock(conversation_id)
        reminder = (
            Reminder.objects.select_for_update()
            .filter(pk=reminder_id, state=Reminder.State.SCHEDULED)
            .first()
        )
        if reminder is None:
            return False
        message = Message.objects.create(
            conversation_id=conversation_id,
            role=Message.Role.ASSISTANT,
            text=reminder_said(reminder, now=database_now()),
            state=Message.State.DONE,
        )
        Reminder.objects.filter(pk=reminder.pk).update(
            state=Reminder.State.DELIVERED, delivered_at=Now(), message=message
        )
        Conversation.objects.filter(pk=conversation_id).update(unread_at=Now(), updated_at=Now())
        transaction.on_commit(
            partial(delivered_publish, conversation_id, message.pk, reminder.owner_id)
        )
    return True


def reminder_said(reminder: Reminder, *, now) -> str:
    said = f"Reminder: {reminder.text}"
    if now - reminder.due_at > timedelta(seconds=settings.CONTINUITY_REMINDER_LATE_SECONDS):
        zone = ZoneInfo(reminder.time_zone or "UTC")
        said += (
            f"\n\n(Late: this was due {when_said(reminder.due_at, zone)}, and the service was "
            "not running then.)"
        )
    return said


def delivered_publish(conversation_id: int, message_id: int, owner_id: int) -> None:
    publish_message_changed(conversation_id=conversation_id, message_id=message_id)
    publish_conversations_changed(owner_id=owner_id)
