"""Messages sent the way the web views send them (`message_accept`), and waiting for replies."""

from __future__ import annotations

import itertools
import time
import uuid

from django.contrib.auth import get_user_model

from continuity.delivery.inbox import message_accept
from continuity.models import Conversation, Message
from continuity.store.connection import row
from continuity.store.messages import WAITING

from .rig import wait_for

# A question without facts (the built-in brain answers "discuss"): no memory or handoff writes,
# the common turn. A turn that states a fact costs a few statements more.
TEXT = "Bench message {n}: how is it going?"
# Replies are seen by polling the database: the latency includes up to this much of the poll.
# Each poll is one prepared statement (a query built by the ORM cost this process more CPU than
# the worker's own statements, on the same two cores).
POLL_SECONDS = 0.001
_numbers = itertools.count(1)


def owner_new(prefix: str = "bench"):
    """A person without a password (hashing one would only slow the set-up down)."""
    return get_user_model().objects.create(username=f"{prefix}-{uuid.uuid4().hex[:12]}")


def conversations_new(count: int, *, owner=None) -> list[Conversation]:
    owner = owner or owner_new()
    return Conversation.objects.bulk_create(
        Conversation(owner=owner, title=f"Bench {i}") for i in range(count)
    )


def message_send(conversation: Conversation, text: str | None = None) -> Message:
    text = text or TEXT.format(n=next(_numbers))
    return message_accept(conversation=conversation, text=text, client_id=uuid.uuid4())


def reply_wait(message: Message, *, timeout: float = 120) -> None:
    wait_for(
        lambda: row("SELECT 1 FROM continuity_message WHERE reply_to_id = %s", [message.pk]),
        timeout=timeout,
        what=f"the reply to message {message.pk}",
        every=POLL_SECONDS,
    )


def one_at_a_time(conversation: Conversation, count: int) -> tuple[list[float], list[float]]:
    """Send `count` messages, each once the previous one is answered: the seconds each accept
    took, and the seconds from each accept's start to its reply being committed."""
    accepts, replies = [], []
    for _ in range(count):
        started = time.perf_counter()
        message = message_send(conversation)
        accepts.append(time.perf_counter() - started)
        reply_wait(message)
        replies.append(time.perf_counter() - started)
    return accepts, replies


def still_waiting(conversation_ids: list[int]) -> int:
    """How many messages of these conversations wait for their reply. One prepared statement:
    polled every 20 ms, a query built by the ORM took this process a few percent of a core.
    Its conditions are those of the index of waiting messages (`message_waiting`): without the
    role, the server read every message in those states, of every conversation, at each poll."""
    (count,) = row(
        f"SELECT COUNT(*) FROM continuity_message WHERE conversation_id = ANY(%s) AND {WAITING}",
        [list(conversation_ids)],
    )
    return count


def all_answered(conversation_ids: list[int], *, timeout: float, every: float = 0.02) -> None:
    wait_for(
        lambda: not still_waiting(conversation_ids),
        timeout=timeout,
        what=f"every message of {len(conversation_ids)} conversation(s) to be answered",
        every=every,
    )


def spread(conversations: list[Conversation], count: int) -> list[Message]:
    """`count` messages, round robin over the conversations, accepted as fast as possible."""
    return [message_send(conversations[i % len(conversations)]) for i in range(count)]
