"""What a person decides about a tool call a crash left in doubt: Run again (with the same
idempotency key) or Skip (the model is told it was not run again)."""

from __future__ import annotations

from django.db import transaction
from django.db.models.functions import Now

from ..delivery.attempts.locking import conversation_lock
from ..delivery.drains import conversation_enqueue
from ..delivery.inbox import message_bump
from ..delivery.toolcalls import SKIPPED_RESULT
from ..live.events import publish_conversation_changed, publish_message_changed
from ..models import Conversation, ToolCall


def tool_call_decide(*, call: ToolCall, choice: str, by) -> bool:
    """Record the owner's `choice` (a ToolCall.Decision) on a call in doubt. Once no call of
    its message is in doubt, the conversation goes on. False when the call was not in doubt
    (decided already, in another tab)."""
    conversation_id = call.message.conversation_id
    with transaction.atomic():
        conversation_lock(conversation_id)
        in_doubt = ToolCall.objects.filter(pk=call.pk, state=ToolCall.State.IN_DOUBT)
        if choice == ToolCall.Decision.RUN_AGAIN:
            decided = in_doubt.update(
                state=ToolCall.State.PENDING, decision=choice, decided_by=by, ended_at=None
            )
        else:
            decided = in_doubt.update(
                state=ToolCall.State.SKIPPED,
                decision=ToolCall.Decision.SKIP,
                decided_by=by,
                result=SKIPPED_RESULT,
                ended_at=Now(),
            )
        if not decided:
            return False
        message_bump(message_id=call.message_id)
        waiting = ToolCall.objects.filter(
            message__conversation_id=conversation_id, state=ToolCall.State.IN_DOUBT
        )
        if not waiting.exists():
            Conversation.objects.filter(
                pk=conversation_id, state=Conversation.State.DECIDING
            ).update(state=Conversation.State.ACTIVE, retry_at=None, waiting_for="")
            transaction.on_commit(lambda: conversation_enqueue(conversation_id=conversation_id))
        transaction.on_commit(lambda: decided_publish(conversation_id, call.message_id))
    return True


def decided_publish(conversation_id: int, message_id: int) -> None:
    publish_message_changed(conversation_id=conversation_id, message_id=message_id)
    publish_conversation_changed(conversation_id=conversation_id)
