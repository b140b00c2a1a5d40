"""Accepting user messages: once these functions return, the message is durable and queued."""

from __future__ import annotations

import logging
import uuid
from functools import partial

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction

from .. import store
from ..errors import ClientIdReused, InvalidMessage
from ..live.events import publish_conversations_changed, publish_message_changed
from ..models import Conversation, Message, ToolCall
from ..store import conversations, messages
from .approvals import approvals_deny
from .attempts.locking import conversation_lock
from .drains import conversation_enqueue

logger = logging.getLogger(__name__)
TITLE_CHARS = 60


def message_clean_text(text: str) -> str:
    """The text to store, or InvalidMessage with a reason fit for the user."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidMessage("Type a message before sending.")
    limit = settings.CONTINUITY_MAX_MESSAGE_CHARS
    if len(text) > limit:
        raise InvalidMessage(
            f"This message is {len(text):,} characters long; the limit is {limit:,}. "
            "Shorten it or split it into several messages."
        )
    return text.strip()


def title_from_text(text: str) -> str:
    words = " ".join(text.split())
    return words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1].rstrip() + "…"


def message_accept(*, conversation: Conversation, text: str, client_id: uuid.UUID) -> Message:
    """Store a user message as queued, once per client id, and enqueue its processing."""
    text = message_clean_text(text)
    try:
        return message_queue(conversation_id=conversation.pk, text=text, client_id=client_id)
    except IntegrityError:
        # A resubmit (or a concurrent submit that won the race): its row, not a second one.
        # Asked only after the insert failed: a first submit, the usual case, costs no lookup.
        existing = Message.objects.get(conversation=conversation, client_id=client_id)
        return same_text_or_refuse(existing, text)


@transaction.atomic
def message_queue(*, conversation_id: int, text: str, **fields) -> Message:
    """Append a user message to the end of the conversation's queue and enqueue its drain.
    `fields`: other values of the message, by attname."""
    stored = messages.message_insert(
        conversation_id=conversation_id, role=Message.Role.USER, text=text, **fields
    )
    # Locking the conversation first makes message ids follow commit order, which is the order
    # in which the conversation is answered. One round trip for both, and the commit, which
    # stamps the drain's send too (`drain_send`).
    added = conversations.message_added(conversation_id)
    found = store.round_trip(added, stored, commit=True)
    message = found[stored]
    conversation_enqueue(conversation_id=conversation_id, stamped=True)
    if found[added] == Conversation.WaitingFor.APPROVAL:
        # The person moved on: what waited for their answer is denied, and the conversation
        # goes on (it is never locked by a question left unanswered).
        transaction.on_commit(partial(approvals_moved_on, conversation_id))
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation_id, message_id=message.pk)
    )
    return message


def approvals_moved_on(conversation_id: int) -> None:
    """After the new message committed: a database that fails here leaves the calls to their
    deadline, and the message (stored already) is not refused."""
    try:
        with transaction.atomic():
            conversation_lock(conversation_id)
            approvals_deny(conversation_id=conversation_id, answer=ToolCall.Answer.MOVED_ON)
    except DatabaseError:
        logger.exception("Calls waiting in conversation %s not denied", conversation_id)


def same_text_or_refuse(existing: Message, text: str) -> Message:
    """A resubmission is the same message only if it carries the same text: returning the
    stored row for an edited text would throw the edit away while the composer clears. Spacing
    alone does not make another message."""
    if existing.text.split() != text.split():
        raise ClientIdReused(
            "This message was already sent with different text. Your edited text is still "
            "here: press Enter to send it as a new message."
        )
    return existing


def conversation_start(*, owner, text: str, client_id: uuid.UUID, brain: str = "") -> Conversation:
    """Create a conversation with its first message; a resubmit returns the same conversation.
    `brain`: one of CONTINUITY_BRAIN_CHOICES, or empty for the default."""
    text = message_clean_text(text)
    existing = Conversation.objects.filter(owner=owner, client_id=client_id).first()
    if existing is None:
        try:
            with transaction.atomic():
                conversation = Conversation.objects.create(
                    owner=owner, title=title_from_text(text), client_id=client_id, brain=brain
                )
                message_accept(conversation=conversation, text=text, client_id=client_id)
                transaction.on_commit(lambda: publish_conversations_changed(owner_id=owner.pk))
            return conversation
        except IntegrityError:
            existing = Conversation.objects.get(owner=owner, client_id=client_id)
    first = Message.objects.filter(conversation=existing, client_id=client_id).first()
    if first is not None:
        same_text_or_refuse(first, text)
    return existing


def message_bump(*, message_id: int, **changes) -> bool:
    """Apply changes to a message and bump its version, so browsers re-render it. `changes`:
    values by column name. Whether the message was there."""
    return store.execute(messages.message_bump(message_id=message_id, **changes))
