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


def publish(conversation_id: int, event: dict) -> None:
    try:
        async_to_sync(get_channel_layer().group_send)(conversation_group(conversation_id), event)
    except Exception:
        logger.warning(
            "Live update %s for conversation %s not sent",
            event["type"],
            conversation_id,
            exc_info=True,
        )


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
