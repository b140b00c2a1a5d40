"""Pausing a conversation: the crash-loop breaker's give-up, and staff's pause from the console.
Staff resume it (`actions.conversations`)."""

from __future__ import annotations

import logging

from django.db import transaction

from ..context.handoffs import handoff_for_pause
from ..errors import InvalidTransition
from ..live.events import (
    publish_conversation_changed,
)
from ..models import Alert, Conversation, StaffAction
from .alerts import alert_mail
from .audit import staff_action_record

logger = logging.getLogger(__name__)


@transaction.atomic
def conversation_pause(*, conversation: Conversation, reason: str, by=None) -> Alert | None:
    """Stop processing a conversation until staff resume it. A "pause" handoff records why,
    for whoever picks the conversation up again. The crash-loop breaker's pause raises an
    alert (and mails it); `by`, a staff member's pause, is audited instead: staff are not
    alerted to what one of them did. A running attempt finishes."""
    # Staff's reason is for staff (the console, the alert, the audit log): the person's notes
    # and the agent's context only learn that support paused it.
    staff_reason = reason
    if by is not None:
        reason = f"{Conversation.PAUSED_BY_STAFF} {by.get_username()}: {staff_reason}"
    # One waiting for a decision on a tool call may be paused: resumed, it asks again.
    updated = Conversation.objects.filter(
        pk=conversation.pk, state__in=[Conversation.State.ACTIVE, Conversation.State.DECIDING]
    ).update(state=Conversation.State.PAUSED, paused_reason=reason, retry_at=None)
    if not updated:
        raise InvalidTransition(f"Conversation {conversation.pk} is not active; cannot pause it.")
    handoff_for_pause(
        conversation=conversation, reason="paused by support" if by is not None else reason
    )
    text = f"Conversation {conversation.pk} ({conversation}) paused: {reason}"
    alert = None
    if by is not None:
        staff_action_record(
            kind=StaffAction.Kind.PAUSE, by=by, reason=staff_reason, conversation=conversation
        )
        logger.info(text)
    else:
        alert = Alert.objects.create(
            kind=Alert.Kind.CONVERSATION_PAUSED, conversation=conversation, text=text
        )
        logger.error(text)
        transaction.on_commit(lambda: alert_mail(subject="Conversation paused", text=text))
    transaction.on_commit(
        lambda: publish_conversation_changed(
            conversation_id=conversation.pk, owner_id=conversation.owner_id
        )
    )
    return alert
