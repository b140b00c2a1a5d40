"""What a person decides about a tool call: one a crash left in doubt, Run again (with the same
idempotency key) or Skip (the model is told it was not run again); one that waits for their
approval, Allow, Deny or Allow for this conversation."""

from __future__ import annotations

from functools import partial

from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from ..delivery.approvals import (
    answered_publish,
    approvals_deny,
    calls_answer,
    conversation_goes_on,
)
from ..delivery.attempts.locking import conversation_lock
from ..delivery.drains import conversation_enqueue
from ..delivery.inbox import message_bump
from ..delivery.toolcalls import SKIPPED_RESULT
from ..live.events import publish_conversation_changed, publish_message_changed
from ..models import Conversation, Message, ToolAllowance, ToolCall


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


def tool_call_answer(*, call: ToolCall, answer: str, by) -> bool:
    """The owner's (or, for a conversation they took over, staff's) answer to a call that
    waits: Allow, Deny, or Allow for this conversation (its tool's later calls here run without
    asking, and its other calls waiting here are allowed too). False when the call no longer
    awaits (answered in another tab, denied, or past its deadline). PermissionDenied for
    staff who have not taken the conversation over: they never answer for its owner."""
    conversation_id = call.message.conversation_id
    with transaction.atomic():
        conversation = conversation_lock(conversation_id)
        if by.pk != conversation.owner_id and not (
            conversation.state == Conversation.State.TAKEN_OVER
            and conversation.taken_over_by_id == by.pk
        ):
            raise PermissionDenied("Only the person, or support who took it over, may answer.")
        awaiting = ToolCall.objects.filter(pk=call.pk)
        if answer == ToolCall.Answer.ALLOW_HERE:
            try:
                with transaction.atomic():
                    ToolAllowance.objects.create(
                        conversation_id=conversation_id,
                        source=call.source,
                        tool=call.tool,
                        allowed_by=by,
                    )
            except IntegrityError:
                pass  # allowed here already
            awaiting = ToolCall.objects.filter(
                message__conversation_id=conversation_id, source=call.source, tool=call.tool
            )
        answered = calls_answer(awaiting=awaiting, answer=answer, by=by)
        if call.pk not in {other.pk for other in answered}:
            transaction.set_rollback(True)  # nothing of a stale answer stays, the allowance none
            return False
        conversation_goes_on(conversation_id)
        transaction.on_commit(partial(answered_publish, conversation_id, answered))
    return True


def tool_calls_stop(*, message: Message) -> int:
    """*Stop* on a reply whose tool calls wait for approval: they are denied, and the model is
    told not to ask again. How many were."""
    with transaction.atomic():
        conversation_lock(message.conversation_id)
        return approvals_deny(
            conversation_id=message.conversation_id,
            answer=ToolCall.Answer.STOPPED,
            message_id=message.pk,
        )
