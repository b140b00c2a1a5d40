"""The live channel of one conversation: streamed reply chunks and re-rendered exchanges.

The socket joins the group before the browser asks for its catch-up (`sync`), and every exchange
it receives carries a version, so whatever is lost or reordered in between is repaired.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
from contextlib import suppress
from importlib import import_module
from types import SimpleNamespace

import redis
from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib import auth
from django.template.loader import render_to_string

from continuity.live.events import conversation_group, session_group, user_group
from continuity.models import Conversation
from continuity.selectors import (
    SIDEBAR_SIZE,
    conversation_status,
    exchanges_of,
    newest_message_id,
    sidebar_conversations_of,
    sidebar_shown,
)

from .socket_counts import REFRESH_SECONDS, socket_count_in, socket_count_out, socket_refresh

logger = logging.getLogger(__name__)
PAGE = "chat/conversation.html"
MAX_SYNC_IDS = 2000
# A sync with MAX_SYNC_IDS ids fits easily; anything bigger is not from our page.
MAX_FRAME_CHARS = 32 * 1024
# Close code for "your session ended": the page tells the person to sign in again.
SESSION_ENDED = 4401
CONVERSATION_DELETED = 4404
SERVER_ERROR = 1011  # the page reconnects and catches up
# The channel layer's Redis is away (a restart, a failover): come back shortly, and catch up.
# HTTP's 503 in the application range: daphne's websocket library lets a server send only 1000
# or 3000-4999, so the standard 1012 (restart) and 1013 (try again later) cannot be sent.
TRY_AGAIN_LATER = 4503
# HTTP's 429 in the same range: the person has CONTINUITY_SOCKETS_PER_USER sockets open.
TOO_MANY_SOCKETS = 4429
LAYER_DOWN = (redis.RedisError, ConnectionError)
SYNC_FORMAT = 'Expected {"type": "sync", "after": <id>, "waiting": [<id>, ...]}.'


class ConversationConsumer(AsyncJsonWebsocketConsumer):
    """A changed message is rendered when the database thread gets to it, not once per event:
    channels runs every socket's database work in one thread, and under load a message changes
    several times while its rendering waits (accepted, answering, answered). One rendering
    then covers every change before it, and a chunk of a message whose rendering is still to
    come is not sent at all: that rendering reads it from the database."""

    groups_joined: tuple[str, ...] = ()
    renderer: asyncio.Task | None = None
    rejoiner: asyncio.Task | None = None
    refresher: asyncio.Task | None = None  # keeps this socket counted (chat/socket_counts.py)
    accepted = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Filled by events on the event loop, taken by the rendering in the database thread.
        self.owed_lock = threading.Lock()
        self.owed_ids: set[int] = set()
        self.owed_status = False
        self.owed_sidebar = False
        self.rendering_ids: set[int] = set()
        # Chunks of the messages being rendered: that rendering may have read the database
        # before they were stored, so they follow it.
        self.held_chunks: list[dict] = []

    async def __call__(self, scope, receive, send) -> None:
        """A channel layer that cannot reach its Redis (joining the groups, or waiting for the
        next event) ends the socket with "try again later", not as a failure of the server: an
        application error would close an open socket with 1011, and answer a handshake with
        HTTP 500. The page reconnects, and catches up by its sync."""
        try:
            await super().__call__(scope, receive, send)
        except LAYER_DOWN as exc:
            logger.warning(
                "Socket closed, to come back: the channel layer is unavailable (%r)", exc
            )
            # disconnect() will not run for this socket: its tasks end here, or a rejoiner would
            # put the dead channel back into its groups for the life of the process (and its
            # count lapses, unrefreshed).
            for task in (self.renderer, self.rejoiner, self.refresher):
                if task is not None:
                    task.cancel()
            with suppress(Exception):  # the client may have gone already
                if not self.accepted:  # a close code needs an open socket
                    await send({"type": "websocket.accept"})
                await send({"type": "websocket.close", "code": TRY_AGAIN_LATER})
        finally:
            # However the socket ended (disconnect() does not run after an error in a handler),
            # it stops counting among its person's, or a few errors would lock them out.
            await self.counted_out()

    async def accept(self, subprotocol=None, headers=None) -> None:
        await super().accept(subprotocol, headers)
        self.accepted = True

    async def dispatch(self, message: dict) -> None:
        """Channels' dispatch without its turn in the database thread before every message (to
        close stale connections): this consumer reaches the database only through
        database_sync_to_async, which closes them around each call, and most messages (chunks,
        changes whose rendering is already due) need no database at all."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

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
        if not await self.counted_in(user.pk):
            await self.accept()  # a close code needs an open socket
            await self.close(code=TOO_MANY_SOCKETS)
            return
        # The user and session groups let a logout, a password change or a deactivation close
        # this socket at once.
        self.groups_joined = (conversation_group(conversation_id), user_group(user.pk))
        if session_key := self.scope["session"].session_key:
            self.groups_joined += (session_group(session_key),)
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        self.rejoiner = asyncio.create_task(self.rejoin_groups())

    async def disconnect(self, code: int) -> None:
        if self.renderer is not None:
            self.renderer.cancel()
        if self.rejoiner is not None:  # first, or it could join again after the discards
            self.rejoiner.cancel()
        await self.counted_out()
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def counted_in(self, user_id: int) -> bool:
        """Count this socket among the person's (off the database thread: Redis only); False
        if they have as many open as they may."""
        kept = {"user_id": user_id, "channel": self.channel_name}
        if not await sync_to_async(socket_count_in, thread_sensitive=False)(**kept):
            return False

        async def refresh() -> None:
            while True:
                await asyncio.sleep(REFRESH_SECONDS)
                await sync_to_async(socket_refresh, thread_sensitive=False)(**kept)

        self.refresher = asyncio.create_task(refresh())
        return True

    async def counted_out(self) -> None:
        """Once, whichever way the socket ends. A refresh still under way in its thread when the
        refresher is cancelled updates only an entry that is there (socket_refresh), so it
        cannot count the socket in again."""
        refresher, self.refresher = self.refresher, None
        if refresher is None:
            return
        refresher.cancel()
        with suppress(Exception):  # Redis away: the entry lapses by itself
            await sync_to_async(socket_count_out, thread_sensitive=False)(
                user_id=self.scope["user"].pk, channel=self.channel_name
            )

    async def rejoin_groups(self) -> None:
        """A channel layer forgets a group member group_expiry after it joined (channels-redis:
        86400 s), and a socket open longer would receive nothing. Joining again renews the
        membership: each wait is drawn at random up to half the expiry (full jitter, so the
        sockets opened together after a restart do not rejoin together), which leaves the other
        half for a rejoin that failed (Redis away) and for clocks that differ between hosts."""
        expiry = getattr(self.channel_layer, "group_expiry", None)
        if not expiry:
            return
        while True:
            await asyncio.sleep(random.uniform(0, expiry / 2))
            try:
                for group in self.groups_joined:
                    await self.channel_layer.group_add(group, self.channel_name)
            except Exception:  # the next turn tries again; the page catches up by its syncs
                logger.warning(
                    "Socket %s could not rejoin its groups", self.channel_name, exc_info=True
                )

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        sync, error = parse_sync_frame(text_data)
        if sync is None:
            await self.send_json({"type": "error", "error": error})
            return
        if not await self.session_still_valid():
            await self.close(code=SESSION_ENDED)
            return
        after, waiting = sync
        branch = await self.branch_stamp()
        up_to, html = await self.render(after, waiting)
        status = await self.render_status()
        await self.send_json(
            {"type": "exchanges", "html": html, "up_to": up_to, "branch": branch, "status": status}
        )
        # The sidebar too: a title given between the page's rendering and this socket joining
        # its owner's group (the first reply's, often) reached the header through the status,
        # and would not reach the sidebar until the next change.
        with self.owed_lock:
            self.owed_sidebar = True
        self.render_owed_soon()

    async def message_changed(self, event: dict) -> None:
        with self.owed_lock:
            self.owed_ids.add(event["message_id"])
            # A failed or interrupted attempt starts a backoff (or pauses), a new one ends it.
            self.owed_status = True
        self.render_owed_soon()

    async def branch_changed(self, event: dict) -> None:
        """Exchanges hidden by a new version or a switch are sent empty and hidden (the page
        removes them), those shown again in full."""
        if event["message_ids"] is None:
            await self.send_json({"type": "reload"})
            return
        branch = await self.branch_stamp()
        _, html = await self.render(None, event["message_ids"])
        status = await self.render_status()
        await self.send_json(
            {"type": "exchanges", "html": html, "branch": branch, "status": status}
        )

    async def conversation_changed(self, event: dict) -> None:
        with self.owed_lock:
            self.owed_status = True
        self.render_owed_soon()

    async def conversations_changed(self, event: dict) -> None:
        with self.owed_lock:
            self.owed_sidebar = True
        self.render_owed_soon()

    async def conversation_deleted(self, event: dict) -> None:
        await self.close(code=CONVERSATION_DELETED)

    async def reply_chunk(self, event: dict) -> None:
        frame = {key: event[key] for key in ("message_id", "run_id", "seq", "text")}
        frame["type"] = "chunk"
        with self.owed_lock:
            if event["message_id"] in self.owed_ids:
                return
            if event["message_id"] in self.rendering_ids:
                self.held_chunks.append(frame)
                return
        await self.send_json(frame)

    def render_owed_soon(self) -> None:
        if self.renderer is None or self.renderer.done():
            self.renderer = asyncio.create_task(self.render_owed())

    async def render_owed(self) -> None:
        try:
            while self.owed_ids or self.owed_status or self.owed_sidebar:
                html, status, sidebar = await self.render_owed_now()
                if sidebar is not None:
                    await self.send_json({"type": "conversations", "html": sidebar})
                # The status goes in the same frame as the exchanges it follows from, so the
                # page never paints one without the other (a partial reply marked interrupted
                # with no word of what happens next, or the other way round).
                if html:
                    frame = {"type": "exchanges", "html": html}
                    await self.send_json(frame if status is None else {**frame, "status": status})
                elif status is not None:
                    await self.send_json({"type": "status", "html": status})
                await self.send_held_chunks()
        except Conversation.DoesNotExist:  # deleted before its own event reached this socket
            await self.close(code=CONVERSATION_DELETED)
        except Exception:  # as a failed handler would: the page reconnects and catches up
            logger.exception("Live rendering of conversation %s failed", self.conversation.pk)
            await self.close(code=SERVER_ERROR)

    async def send_held_chunks(self) -> None:
        while True:
            with self.owed_lock:
                if not self.held_chunks:
                    self.rendering_ids = set()
                    return
                frame = self.held_chunks.pop(0)
            await self.send_json(frame)

    async def session_ended(self, event: dict) -> None:
        await self.close(code=SESSION_ENDED)

    @database_sync_to_async
    def session_still_valid(self) -> bool:
        """Whether the session this socket was opened with still signs in the same user: not
        logged out, expired, invalidated by a password change, nor its user deactivated."""
        key = self.scope["session"].session_key
        if not key:
            return False
        store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
        user = auth.get_user(SimpleNamespace(session=store))
        return user.is_authenticated and user.pk == self.scope["user"].pk

    @database_sync_to_async
    def conversation_of(self, user, conversation_id: int) -> Conversation | None:
        return Conversation.objects.filter(owner=user, pk=conversation_id).first()

    @database_sync_to_async
    def render(self, after: int | None, message_ids: list[int]) -> tuple[int | None, str]:
        """With `after`, the newest message id at the start (the browser has everything up to
        it once it has this rendering); and the exchanges asked for plus every one after
        `after`."""
        up_to, wanted = None, set(message_ids)
        if after is not None:
            up_to = newest_message_id(conversation=self.conversation)
            wanted |= set(
                self.conversation.messages.filter(pk__gt=after).values_list("pk", flat=True)
            )
        return up_to, self.exchanges_html(wanted)

    @database_sync_to_async
    def render_owed_now(self) -> tuple[str, str | None, str | None]:
        """The exchanges of the changed messages, and the status and the sidebar if they are
        owed: what is taken here is read after the changes were committed."""
        with self.owed_lock:
            self.rendering_ids, self.owed_ids = self.owed_ids, set()
            status_owed, self.owed_status = self.owed_status, False
            sidebar_owed, self.owed_sidebar = self.owed_sidebar, False
        html = self.exchanges_html(self.rendering_ids) if self.rendering_ids else ""
        status = self.status_html() if status_owed else None
        return html, status, self.sidebar_html() if sidebar_owed else None

    def sidebar_html(self) -> str:
        return render_to_string(
            f"{PAGE}#sidebar_list",
            {
                "conversations": sidebar_shown(
                    conversations=sidebar_conversations_of(owner=self.conversation.owner_id)[
                        :SIDEBAR_SIZE
                    ]
                ),
                "conversation": self.conversation,
            },
        )

    def exchanges_html(self, message_ids: set[int]) -> str:
        return "".join(
            render_to_string(f"{PAGE}#exchange", {"exchange": exchange})
            for exchange in exchanges_of(conversation=self.conversation, message_ids=message_ids)
        )

    @database_sync_to_async
    def branch_stamp(self) -> int:
        """How often the shown branch has changed: a page that saw another count reloads.
        Read before the rendering, so a change in between makes the page reload, not miss."""
        stamp = Conversation.objects.filter(pk=self.conversation.pk).values_list(
            "branch_changes", flat=True
        )
        return stamp.first() or 0

    @database_sync_to_async
    def render_status(self) -> str:
        return self.status_html()

    def status_html(self) -> str:
        """The status by the composer, and the title (renamed, titled by the brain, archived)."""
        self.conversation.refresh_from_db()
        context = conversation_status(conversation=self.conversation)
        return render_to_string(f"{PAGE}#status", context) + render_to_string(
            f"{PAGE}#title", context
        )


def parse_sync_frame(text: str | None) -> tuple[tuple[int, list[int]] | None, str]:
    """((after, waiting), "") from a well-formed sync frame, else (None, what is wrong)."""
    if text is None or len(text) > MAX_FRAME_CHARS:
        return None, f"Frame too large: at most {MAX_FRAME_CHARS} characters. {SYNC_FORMAT}"
    try:
        request = json.loads(text)
    except RecursionError:
        return None, f"Frame nested too deep. {SYNC_FORMAT}"
    except ValueError:
        return None, SYNC_FORMAT
    return parse_sync(request), SYNC_FORMAT


def parse_sync(request: object) -> tuple[int, list[int]] | None:
    """(after, waiting) from a well-formed sync request, else None."""
    if not isinstance(request, dict) or request.get("type") != "sync":
        return None
    after, waiting = request.get("after", 0), request.get("waiting", [])
    valid_ids = (
        isinstance(waiting, list)
        and len(waiting) <= MAX_SYNC_IDS
        and all(type(pk) is int for pk in waiting)
    )
    if type(after) is not int or not valid_ids:
        return None
    return after, waiting
