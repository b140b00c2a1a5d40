"""The live channel of one conversation: streamed reply chunks and re-rendered exchanges.

The socket joins the group before the browser asks for its catch-up (`sync`), and every exchange
it receives carries a version, so whatever is lost or reordered in between is repaired.
"""

from __future__ import annotations

import json

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.template.loader import render_to_string

from continuity.events import conversation_group
from continuity.models import Conversation
from continuity.selectors import exchanges_of, newest_message_id

PAGE = "chat/conversation.html"
MAX_SYNC_IDS = 2000


class ConversationConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        conversation_id = self.scope["url_route"]["kwargs"]["pk"]
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.conversation = await self.conversation_of(user, conversation_id)
        if self.conversation is None:
            await self.close()
            return
        self.group = conversation_group(conversation_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            request = json.loads(text_data or "")
        except ValueError:
            request = None
        sync = parse_sync(request)
        if sync is None:
            await self.send_json(
                {
                    "type": "error",
                    "error": 'Expected {"type": "sync", "after": <id>, "pending": [<id>, ...]}.',
                }
            )
            return
        after, pending = sync
        up_to, html = await self.render(after, pending)
        await self.send_json({"type": "exchanges", "html": html, "up_to": up_to})
        await self.send_json({"type": "status", "html": await self.render_status()})

    async def message_changed(self, event: dict) -> None:
        _, html = await self.render(None, [event["message_id"]])
        await self.send_json({"type": "exchanges", "html": html})

    async def conversation_changed(self, event: dict) -> None:
        await self.send_json({"type": "status", "html": await self.render_status()})

    async def reply_chunk(self, event: dict) -> None:
        await self.send_json(
            {key: event[key] for key in ("message_id", "run_id", "seq", "text")} | {"type": "chunk"}
        )

    @database_sync_to_async
    def conversation_of(self, user, conversation_id: int) -> Conversation | None:
        return Conversation.objects.filter(owner=user, pk=conversation_id).first()

    @database_sync_to_async
    def render(self, after: int | None, message_ids: list[int]) -> tuple[int, str]:
        """The newest message id at the start (the browser has everything up to it once it has
        this rendering), and the exchanges asked for plus every one after `after`."""
        up_to = newest_message_id(self.conversation)
        wanted = set(message_ids)
        if after is not None:
            wanted |= set(
                self.conversation.messages.filter(pk__gt=after).values_list("pk", flat=True)
            )
        html = "".join(
            render_to_string(f"{PAGE}#exchange", {"exchange": exchange})
            for exchange in exchanges_of(self.conversation, message_ids=wanted)
        )
        return up_to, html

    @database_sync_to_async
    def render_status(self) -> str:
        self.conversation.refresh_from_db()
        return render_to_string(f"{PAGE}#status", {"conversation": self.conversation})


def parse_sync(request: object) -> tuple[int, list[int]] | None:
    """(after, pending) from a well-formed sync request, else None."""
    if not isinstance(request, dict) or request.get("type") != "sync":
        return None
    after, pending = request.get("after", 0), request.get("pending", [])
    valid_ids = (
        isinstance(pending, list)
        and len(pending) <= MAX_SYNC_IDS
        and all(type(pk) is int for pk in pending)
    )
    if type(after) is not int or not valid_ids:
        return None
    return after, pending
