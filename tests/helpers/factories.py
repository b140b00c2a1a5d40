from __future__ import annotations

import uuid

import factory
from django.contrib.auth import get_user_model

from continuity.models import Conversation, Message

PASSWORD = "correct horse battery staple"


class UserFactory(factory.django.DjangoModelFactory):
    """Saved once, with its password already hashed: a second save that set the password would
    look like a password change to chat.signals, whose "session ended" event (published after a
    10 ms linger) could then close a socket the test opened for the new user."""

    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password(PASSWORD)


class ConversationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Conversation

    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Conversation {n}")


class MessageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Message

    conversation = factory.SubFactory(ConversationFactory)
    role = Message.Role.USER
    text = factory.Sequence(lambda n: f"Message number {n}")
    client_id = factory.LazyFunction(uuid.uuid4)
