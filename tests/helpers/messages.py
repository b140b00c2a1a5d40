"""Messages as the tests make them: sent through the inbox, or stored answered."""

from __future__ import annotations

import uuid

from continuity.delivery.inbox import message_accept
from continuity.models import Conversation, Message
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory


def send(conversation: Conversation, text: str = "hello") -> Message:
    """A message accepted as a person's send is: durable, with its drain sent on commit."""
    return message_accept(conversation=conversation, text=text, client_id=uuid.uuid4())


def answered(conversation: Conversation, text: str) -> Message:
    """A user message with its reply, as the pipeline leaves them."""
    question = MessageFactory(conversation=conversation, text=text, state=Message.State.DONE)
    Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text=f"Reply to {text}",
        state=Message.State.DONE,
        reply_to=question,
    )
    return question


def store_reply(message: Message, text: str) -> None:
    """The message answered with `text`, as the pipeline leaves it."""
    Message.objects.filter(pk=message.pk).update(state=Message.State.DONE)
    Message.objects.create(
        conversation_id=message.conversation_id,
        role=Message.Role.ASSISTANT,
        text=text,
        state=Message.State.DONE,
        reply_to=message,
    )


def conversations(count: int) -> list[Conversation]:
    """`count` new conversations of one person."""
    owner = UserFactory()
    return [ConversationFactory(owner=owner) for _ in range(count)]
