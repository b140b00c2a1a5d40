"""Live updates to browsers through the channel layer.

Group messages are at-most-once: everything published here is already in the database, and a
reconnecting browser catches up from there. A failed publish is therefore logged, never raised.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def conversation_group(conversation_id: int) -> str:
    return f"conversation.{conversation_id}"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def session_group(session_key: str) -> str:
    return f"session.{session_key}"


def publish(conversation_id: int, event: dict) -> None:
    group_publish(conversation_group(conversation_id), event)


def group_publish(group: str, event: dict) -> None:
    try:
        async_to_sync(get_channel_layer().group_send)(group, event)
    except Exception:
        logger.warning("Live update %s to %s not sent", event["type"], group, exc_info=True)


def publish_session_ended(*, user_id: int | None = None, session_key: str | None = None) -> None:
    """Close the sockets of one session (logout) or of every session of a user (password
    change, deactivation). A missed event is caught by the check the socket makes on its next
    sync."""
    if user_id is not None:
        group_publish(user_group(user_id), {"type": "session.ended"})
    if session_key:
        group_publish(session_group(session_key), {"type": "session.ended"})


def publish_message_changed(*, conversation_id: int, message_id: int) -> None:
    publish(conversation_id, {"type": "message.changed", "message_id": message_id})


def publish_conversation_changed(*, conversation_id: int) -> None:
    publish(conversation_id, {"type": "conversation.changed"})


def publish_reply_chunk(
    *, conversation_id: int, message_id: int, run_id: int, seq: int, text: str
) -> None:
    publish(
        conversation_id,
        {
            "type": "reply.chunk",
            "message_id": message_id,
            "run_id": run_id,
            "seq": seq,
            "text": text,
        },
    )
