"""Accepting user messages: once these functions return, the message is durable and queued."""

from __future__ import annotations

import logging
import uuid

import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.utils import timezone
from kombu.exceptions import OperationalError

from .errors import ClientIdReused, InvalidMessage
from .events import publish_message_changed
from .heartbeats import key_delete, keys_alive, redis_client
from .models import Conversation, Message

logger = logging.getLogger(__name__)

TITLE_CHARS = 60
SEND_ERRORS = (redis.RedisError, OperationalError, OSError)


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


def drain_marker_key(conversation_id: int) -> str:
    return f"continuity:conversation:{conversation_id}:drain-queued"


def conversation_enqueue(*, conversation_id: int) -> None:
    """Ask a worker to drain the conversation once the current transaction commits.

    The stored pending message, not this broker message, is the real outbox: if the send is lost
    (process death right after commit, Redis down or flushed), the watchdog sends it again.
    """
    Conversation.objects.filter(pk=conversation_id).update(enqueued_at=Now())
    transaction.on_commit(lambda: drain_send(conversation_id=conversation_id))


def drain_send(*, conversation_id: int) -> None:
    """Send a drain task unless one for this conversation is already waiting in the queue.

    One waiting drain per conversation keeps the queue fair: a drain answers one message and then
    sends the next drain to the back of the queue, so conversations take turns. The marker lives
    in the broker's Redis, so a Redis that loses its queue loses the markers with it, and a
    worker clears it when it receives the task.
    """
    from .tasks import drain_conversation as drain_conversation_task

    marker = drain_marker_key(conversation_id)
    ttl = int(settings.CONTINUITY_DRAIN_MARKER_SECONDS)
    claimed, sent = True, False  # claimed unless Redis answers that another drain holds it
    try:
        claimed = bool(redis_client().set(marker, "1", nx=True, ex=ttl))
        if claimed:
            # The limits are read now, from this process's settings: Celery would otherwise
            # put the values it cached at its first send into every message.
            drain_conversation_task.apply_async(
                (conversation_id,),
                soft_time_limit=settings.CELERY_TASK_SOFT_TIME_LIMIT,
                time_limit=settings.CELERY_TASK_TIME_LIMIT,
            )
            sent = True
    except SEND_ERRORS:
        # Only broker and network errors: a soft time limit raised meanwhile must reach the task.
        logger.warning(
            "Enqueue of conversation %s failed; the watchdog will retry",
            conversation_id,
            exc_info=True,
        )
    finally:
        if claimed and not sent:
            # A marker without its task would hold off every enqueue until it expires.
            key_delete(marker)


def drain_started(*, conversation_id: int) -> None:
    """A drain left the queue (a worker received it): the next enqueue may send another one."""
    key_delete(drain_marker_key(conversation_id))


def drains_waiting(conversation_ids: list[int]) -> set[int]:
    """The conversations among these that have a drain waiting in the queue."""
    alive = keys_alive([drain_marker_key(pk) for pk in conversation_ids])
    return {pk for pk in conversation_ids if drain_marker_key(pk) in alive}


def message_accept(*, conversation: Conversation, text: str, client_id: uuid.UUID) -> Message:
    """Store a user message as queued, once per client id, and enqueue its processing."""
    text = message_clean_text(text)
    existing = Message.objects.filter(conversation=conversation, client_id=client_id).first()
    if existing is not None:
        return same_text_or_refuse(existing, text)
    try:
        with transaction.atomic():
            # Locking the conversation makes message ids follow commit order, which is the order
            # in which the conversation is answered.
            Conversation.objects.select_for_update().filter(pk=conversation.pk).update(
                updated_at=timezone.now()
            )
            message = Message.objects.create(
                conversation=conversation, role=Message.Role.USER, text=text, client_id=client_id
            )
            conversation_enqueue(conversation_id=conversation.pk)
            transaction.on_commit(
                lambda: publish_message_changed(
                    conversation_id=conversation.pk, message_id=message.pk
                )
            )
    except IntegrityError:
        # A concurrent submit of the same client id won the race: return its row.
        existing = Message.objects.get(conversation=conversation, client_id=client_id)
        return same_text_or_refuse(existing, text)
    return message


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


def conversation_start(*, owner, text: str, client_id: uuid.UUID) -> Conversation:
    """Create a conversation with its first message; a resubmit returns the same conversation."""
    text = message_clean_text(text)
    existing = Conversation.objects.filter(owner=owner, client_id=client_id).first()
    if existing is None:
        try:
            with transaction.atomic():
                conversation = Conversation.objects.create(
                    owner=owner, title=title_from_text(text), client_id=client_id
                )
                message_accept(conversation=conversation, text=text, client_id=client_id)
            return conversation
        except IntegrityError:
            existing = Conversation.objects.get(owner=owner, client_id=client_id)
    first = Message.objects.filter(conversation=existing, client_id=client_id).first()
    if first is not None:
        same_text_or_refuse(first, text)
    return existing


def message_bump(*, message_id: int, **changes) -> int:
    """Apply changes to a message and bump its version, so browsers re-render it."""
    return Message.objects.filter(pk=message_id).update(version=F("version") + 1, **changes)
