"""A person from support takes a conversation over from the agent, answers in its thread, and
hands it back with a note (docs/staff-console.md).

While a conversation is taken over its state is not active, and every path that begins an
attempt (a drain, the watchdog's re-enqueue, a worker's start-up scan) begins one only on an
active conversation, under its lock: no worker crash, restart or late task lets the agent answer.
The person's messages wait; each reply from support answers the oldest one. Those left when it is
handed back are answered by the agent, in order, with the note in its handoff.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models.functions import Now

from ..brains import GO_ON_FROM_SUPPORT
from ..context.handoffs import handoff_revise, section_text
from ..delivery.approvals import approvals_deny
from ..delivery.attempts.locking import conversation_lock
from ..delivery.audit import staff_action_record
from ..delivery.drains import conversation_enqueue
from ..delivery.inbox import message_bump
from ..errors import TAKEN_OVER, InvalidTransition
from ..live.events import publish_conversation_changed, publish_message_changed
from ..models import Conversation, Handoff, Message, Run, StaffAction, ToolCall

logger = logging.getLogger(__name__)


def support_name(user) -> str:
    """How the person sees a staff member: their first name, or their username."""
    return user.first_name or user.get_username()


@transaction.atomic
def conversation_take_over(*, conversation: Conversation, by, reason: str) -> None:
    """Stop the agent answering `conversation`; its messages wait for `by`. An attempt being
    written is given back, uncharged: its question waits for support's first reply (or the
    agent's, after the hand-back), and what it wrote stays on the page as interrupted, never as
    the question's answer. In a burst the next question's attempt begins in the transaction
    that stores the reply before it, so a takeover usually lands on one only just begun."""
    conversation_lock(conversation.pk)
    # Not a paused one: resuming it (which settles its crashes and alerts) comes first.
    # One waiting for its owner's decision on a tool call too: after the hand-back, the next
    # attempt finds the call still in doubt and asks again.
    updated = Conversation.objects.filter(
        pk=conversation.pk, state__in=[Conversation.State.ACTIVE, Conversation.State.DECIDING]
    ).update(state=Conversation.State.TAKEN_OVER, taken_over_by=by, retry_at=None)
    if not updated:
        raise InvalidTransition(
            f"Conversation {conversation.pk} is not active (taken over already, or paused: "
            "resume it first)."
        )
    running = Run.objects.select_related("message").filter(
        conversation=conversation, state=Run.State.RUNNING
    )
    interrupted = running.first()
    if interrupted is not None:
        attempt_give_to_support(run=interrupted, reason=reason)
    staff_action_record(
        kind=StaffAction.Kind.TAKE_OVER,
        by=by,
        reason=reason,
        conversation=conversation,
        details={"interrupted_run": interrupted.pk} if interrupted is not None else {},
    )
    logger.info("Conversation %s taken over by %s: %s", conversation.pk, by, reason)
    transaction.on_commit(
        lambda: publish_conversation_changed(
            conversation_id=conversation.pk, owner_id=conversation.owner_id
        )
    )


def attempt_give_to_support(*, run: Run, reason: str) -> None:
    """End the attempt as interrupted and give its question back, not charged: its attempt count
    is as before it began. It counts as an interruption, so the page shows what it wrote while
    the question waits, but never dead-letters it: support is about to answer. The attempt
    learns it at its next fenced write or heartbeat, and ends without writing anything more."""
    ended = Run.objects.filter(pk=run.pk, state=Run.State.RUNNING).update(
        state=Run.State.INTERRUPTED, ended_at=Now(), error=f"{TAKEN_OVER}: {reason}"
    )
    if not ended:  # withdrawn or ended meanwhile: whoever did it has given its message back
        return
    message = run.message
    message_bump(
        message_id=message.pk,
        state=Message.State.QUEUED,
        attempts=run.attempt - 1,
        interruptions=message.interruptions + 1,
    )
    logger.info("Attempt %s of message %s given to support", run.pk, message.pk)
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=run.conversation_id, message_id=message.pk)
    )


def waiting_for_support(conversation: Conversation) -> Message | None:
    """The person's oldest message not answered yet: what support's next reply answers."""
    return conversation.messages.waiting().shown().order_by("id").first()


@transaction.atomic
def staff_reply(
    *, conversation: Conversation, by, text: str, answering: int | None = None
) -> Message:
    """`by`'s answer to the person's oldest waiting message, stored as support's reply (never
    as the agent's), shown on their page at once. `answering`: the id of the message the form
    showed as answered, refused when it is answered already (a second submit, another tab)."""
    conversation_lock(conversation.pk)
    conversation.refresh_from_db()
    if conversation.state != Conversation.State.TAKEN_OVER or conversation.taken_over_by != by:
        raise InvalidTransition("Only the person who took this conversation over answers in it.")
    question = waiting_for_support(conversation)
    if question is None:
        raise InvalidTransition("Nothing to answer: the person has not written since.")
    if answering is not None and question.pk != answering:
        raise InvalidTransition(
            "That message was answered already; your reply is kept here, for the next one."
        )
    reply = Message.objects.create(
        conversation=conversation,
        role=Message.Role.STAFF,
        text=text,
        state=Message.State.DONE,
        reply_to=question,
        author=by,
    )
    Message.objects.filter(pk=question.pk).update(
        state=Message.State.DONE, version=question.version + 1
    )
    approvals_deny(  # its calls that waited for approval: support answered instead
        conversation_id=conversation.pk,
        answer=ToolCall.Answer.SUPPORT_ANSWERED,
        message_id=question.pk,
    )
    staff_action_record(
        kind=StaffAction.Kind.STAFF_REPLY,
        by=by,
        conversation=conversation,
        details={"message_id": question.pk, "reply_id": reply.pk},
    )
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation.pk, message_id=question.pk)
    )
    return reply


@transaction.atomic
def conversation_hand_back(*, conversation: Conversation, by, note: str) -> Handoff | None:
    """Give the conversation back to the agent: `note` goes into a new handoff version, which
    its next attempt reads; the messages still waiting are answered in order."""
    conversation_lock(conversation.pk)
    updated = Conversation.objects.filter(
        pk=conversation.pk, state=Conversation.State.TAKEN_OVER
    ).update(
        state=Conversation.State.ACTIVE, taken_over_by=None, handed_back_at=Now(), retry_at=None
    )
    if not updated:
        raise InvalidTransition(f"Conversation {conversation.pk} is not taken over.")
    said = f"Handed back by {support_name(by)} from support: {note.strip()}"

    def edit(sections: dict[str, str]) -> dict[str, str]:
        sections["critical_context"] = section_text([said, sections["critical_context"]])
        sections["next_steps"] = section_text(
            [GO_ON_FROM_SUPPORT, sections["next_steps"]]
        )  # fmt: skip
        return sections

    handoff = handoff_revise(
        conversation_id=conversation.pk, reason=Handoff.Reason.HANDED_BACK, edit=edit, author=by
    )
    staff_action_record(
        kind=StaffAction.Kind.HAND_BACK, by=by, reason=note, conversation=conversation
    )
    logger.info("Conversation %s handed back by %s", conversation.pk, by)
    conversation_enqueue(conversation_id=conversation.pk)
    transaction.on_commit(
        lambda: publish_conversation_changed(
            conversation_id=conversation.pk, owner_id=conversation.owner_id
        )
    )
    return handoff
