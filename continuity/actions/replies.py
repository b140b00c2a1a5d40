"""A person, or staff from the console, stops the reply being written."""

from __future__ import annotations

import logging

from django.db import transaction

from ..delivery.approvals import approvals_deny
from ..delivery.attempts.finish import reply_store
from ..delivery.attempts.locking import conversation_lock
from ..delivery.audit import staff_action_record
from ..errors import InvalidTransition
from ..models import Message, Run, StaffAction, ToolCall

logger = logging.getLogger(__name__)


def reply_stop(
    *, message: Message, run_id: int | None = None, by=None, reason: str = ""
) -> Message:
    """The person stopped the reply being written to `message` (or, with `by`, staff did from
    the console, audited): keep what was written as the reply, marked stopped; nothing is
    retried, and the next queued message goes on.

    The attempt learns it at its next write or heartbeat (its run is no longer running) and
    ends without writing anything more: every write of an attempt is fenced on its run's
    state. A stopped reply stores no new memory or handoff; the exchange stays in the history."""
    with transaction.atomic():
        conversation_lock(message.conversation_id)
        run = Run.objects.select_for_update().filter(message=message, state=Run.State.RUNNING)
        if run_id is not None:  # the attempt staff confirmed, not a later one of the message
            run = run.filter(pk=run_id)
        run = run.first()
        if run is None:
            raise InvalidTransition(f"No reply is being written to message {message.pk}.")
        # Calls of this reply that were just recorded to wait for approval: the reply is over.
        approvals_deny(
            conversation_id=message.conversation_id,
            answer=ToolCall.Answer.STOPPED,
            message_id=message.pk,
        )
        written = run.reply_chunks.order_by("seq").values_list("text", flat=True)
        reply = reply_store(
            run=run,
            text="".join(written),
            run_state=Run.State.STOPPED,
            error="Stopped by staff." if by is not None else "Stopped by the user.",
            stopped=True,
        ).reply
        if by is not None:
            Message.objects.filter(pk=reply.pk).update(stopped_by_staff=True)
            reply.stopped_by_staff = True
            staff_action_record(
                kind=StaffAction.Kind.STOP,
                by=by,
                reason=reason,
                conversation_id=message.conversation_id,
                details={"run": run.pk, "message": message.pk},
            )
    logger.info(
        "Attempt %s of message %s stopped by %s",
        run.pk,
        message.pk,
        f"staff ({by.get_username()})" if by is not None else "its owner",
    )
    return reply
