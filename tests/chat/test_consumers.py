"""The conversation websocket through the real ASGI stack and the Redis channel layer."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.live.events import (
    conversation_group,
    publish_message_changed,
    publish_reply_chunk,
    publisher_close,
    publisher_flush,
)
from continuity.models import Conversation, ReplyChunk
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.postgres import another_session
from tests.helpers.sockets import communicator, connects, session_headers
from tests.helpers.waiting import lock_waiters, wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the consumer reads in threads of its own


@pytest.fixture
def owned():
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    message = message_accept(conversation=conversation, text="Hello socket", client_id=uuid.uuid4())
    # Its live event goes out now, to no socket: not later, to a socket the test opens.
    publisher_flush()
    return owner, conversation, message


def test_owner_connects_and_catches_up_with_a_sync(owned):
    owner, conversation, message = owned
    headers = session_headers(owner)

    async def scenario():
        socket = communicator(conversation.pk, headers)
        assert (await socket.connect())[0]
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": []})
        exchanges = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return exchanges, exchanges["status"]

    exchanges, status = async_to_sync(scenario)()
    assert exchanges["type"] == "exchanges" and exchanges["up_to"] == message.pk
    assert (
        f'id="exchange-{message.pk}"' in exchanges["html"] and "Hello socket" in exchanges["html"]
    )
    assert 'id="conversation-status"' in status  # in the same frame: painted together


@pytest.mark.parametrize(
    ("who", "origin"),
    [
        ("anonymous", "http://localhost"),
        ("other user", "http://localhost"),
        ("owner", "http://evil.example"),
    ],
)
def test_refused_connections(owned, who, origin):
    owner, conversation, _ = owned
    user = {"anonymous": None, "other user": UserFactory(), "owner": owner}[who]
    assert not connects(conversation.pk, session_headers(user, origin))


def test_unknown_conversation_is_refused(owned):
    owner, conversation, _ = owned
    assert not connects(conversation.pk + 1000, session_headers(owner))


def test_malformed_frames_get_an_error_and_the_socket_stays_usable(owned):
    owner, conversation, message = owned
    headers = session_headers(owner)

    async def scenario():
        socket = communicator(conversation.pk, headers)
        await socket.connect()
        replies = []
        for frame in [
            "not json",
            '{"type": "sync", "after": "x"}',
            '{"type": "launch"}',
            '{"type": "sync", "waiting": [1, "2"]}',
        ]:
            await socket.send_to(text_data=frame)
            replies.append(await socket.receive_json_from(timeout=5))
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": [message.pk]})
        replies.append(await socket.receive_json_from(timeout=5))
        await socket.disconnect()
        return replies

    replies = async_to_sync(scenario)()
    assert [reply["type"] for reply in replies] == ["error"] * 4 + ["exchanges"]
    assert "sync" in replies[0]["error"]


def test_published_events_reach_the_socket(owned):
    owner, conversation, message = owned
    headers = session_headers(owner)

    async def scenario():
        socket = communicator(conversation.pk, headers)
        await socket.connect()
        from asgiref.sync import sync_to_async

        await sync_to_async(publish_reply_chunk)(
            conversation_id=conversation.pk, message_id=message.pk, run_id=7, seq=1, text="Hel"
        )
        chunk = await socket.receive_json_from(timeout=5)
        await sync_to_async(publish_message_changed)(
            conversation_id=conversation.pk, message_id=message.pk
        )
        exchange = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return chunk, exchange

    chunk, exchange = async_to_sync(scenario)()
    assert chunk == {
        "type": "chunk",
        "message_id": message.pk,
        "run_id": 7,
        "seq": 1,
        "text": "Hel",
    }
    assert exchange["type"] == "exchanges" and f"exchange-{message.pk}" in exchange["html"]


GROUP_EXPIRY = 1


@pytest.fixture
def short_group_expiry(settings):
    """Channel groups that forget a member GROUP_EXPIRY seconds after it joined, for the
    consumer and for the publisher (which drops members older than that)."""
    layer = settings.CHANNEL_LAYERS["default"]
    config = {**layer["CONFIG"], "group_expiry": GROUP_EXPIRY}
    settings.CHANNEL_LAYERS = {"default": {**layer, "CONFIG": config}}
    publisher_close()
    yield
    publisher_close()


def test_a_socket_joins_its_groups_again_before_they_forget_it(owned, short_group_expiry):
    owner, conversation, message = owned
    headers = session_headers(owner)
    group_key = get_channel_layer()._group_key(conversation_group(conversation.pk))
    client = redis.Redis.from_url(settings.REDIS_URL)

    def joined_at() -> float:
        members = client.zrange(group_key, 0, -1, withscores=True)
        return members[0][1] if len(members) == 1 else 0.0

    async def scenario():
        socket = communicator(conversation.pk, headers)
        assert (await socket.connect())[0]
        first = joined_at()
        # Joined again after more than two expiries: the first membership would be long gone.
        await asyncio.to_thread(
            wait_for,
            lambda: joined_at() > first + 2 * GROUP_EXPIRY,
            timeout=10 * GROUP_EXPIRY,
            what="the socket to join its conversation's group again",
        )
        publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
        exchange = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return exchange

    exchange = async_to_sync(scenario)()
    assert exchange["type"] == "exchanges" and f"exchange-{message.pk}" in exchange["html"]
    assert not client.exists(group_key)  # and left it when it closed


@pytest.mark.postgresql("locks the messages table from another session, which SQLite does not have")
def test_changes_made_while_a_rendering_waits_are_rendered_together(owned):
    """The messages table is locked while the socket renders the first message: what reaches the
    socket meanwhile waits for that rendering (its chunk) or for one rendering of its own."""
    owner, conversation, first = owned
    second = message_accept(conversation=conversation, text="And again", client_id=uuid.uuid4())
    headers = session_headers(owner)
    blocker = another_session(autocommit=False)

    def chunk(message_id: int, seq: int) -> None:
        publish_reply_chunk(
            conversation_id=conversation.pk, message_id=message_id, run_id=7, seq=seq, text="x"
        )

    async def scenario():
        socket = communicator(conversation.pk, headers)
        assert (await socket.connect())[0]
        blocker.execute("LOCK TABLE continuity_message IN ACCESS EXCLUSIVE MODE")
        publish_message_changed(conversation_id=conversation.pk, message_id=first.pk)
        await asyncio.to_thread(
            wait_for, lock_waiters, timeout=10, what="the rendering to wait for the lock"
        )
        chunk(first.pk, 1)  # may not be in the rendering under way: sent after it
        for _ in range(2):
            publish_message_changed(conversation_id=conversation.pk, message_id=second.pk)
        chunk(second.pk, 1)  # its rendering is still to come, and will hold it
        chunk(first.pk + 1000, 1)  # a message nothing waits for: sent at once
        frames = [await socket.receive_json_from(timeout=5)]
        blocker.rollback()
        frames += [await socket.receive_json_from(timeout=5) for _ in range(3)]
        assert await socket.receive_nothing(timeout=0.5)
        await socket.disconnect()
        return frames

    try:
        frames = async_to_sync(scenario)()
    finally:
        blocker.close()
    kinds = [(frame["type"], frame.get("message_id")) for frame in frames]
    assert kinds == [
        ("chunk", first.pk + 1000),
        ("exchanges", None),
        ("chunk", first.pk),
        ("exchanges", None),
    ]
    assert (
        f"exchange-{first.pk}" in frames[1]["html"] and "conversation-status" in frames[1]["status"]
    )
    assert f"exchange-{second.pk}" not in frames[1]["html"]
    assert f"exchange-{second.pk}" in frames[3]["html"]
    assert f"exchange-{first.pk}" not in frames[3]["html"]


def test_a_reconnecting_browser_gets_the_partial_reply_from_the_database(owned):
    owner, conversation, message = owned
    headers = session_headers(owner)
    run = attempt_begin(conversation_id=conversation.pk)
    for seq, text in enumerate(["Nice ", "to ", "meet "], start=1):
        ReplyChunk.objects.create(message=message, run=run, seq=seq, text=text)

    async def scenario():
        socket = communicator(conversation.pk, headers)
        await socket.connect()
        await socket.send_json_to({"type": "sync", "after": message.pk, "waiting": [message.pk]})
        exchanges = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return exchanges["html"]

    html = async_to_sync(scenario)()
    assert 'data-seq="3"' in html and f'data-run="{run.pk}"' in html
    assert '<span class="streamed">Nice to meet </span>' in html


def test_a_sync_never_renders_another_conversations_messages(owned):
    owner, conversation, _ = owned
    headers = session_headers(owner)
    foreign = message_accept(
        conversation=ConversationFactory(), text="Not yours", client_id=uuid.uuid4()
    )

    async def scenario():
        socket = communicator(conversation.pk, headers)
        await socket.connect()
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": [foreign.pk]})
        exchanges = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return exchanges["html"]

    html = async_to_sync(scenario)()
    assert "Not yours" not in html and f"exchange-{foreign.pk}" not in html


def closed_with(socket_output: dict) -> int | None:
    return socket_output.get("code") if socket_output.get("type") == "websocket.close" else None


@pytest.mark.parametrize("change", ["password changed", "deactivated"])
def test_a_credential_change_closes_every_socket_of_the_user(owned, change):
    owner, conversation, _ = owned
    headers = session_headers(owner)

    async def scenario():
        from asgiref.sync import sync_to_async

        socket = communicator(conversation.pk, headers)
        assert (await socket.connect())[0]

        def change_user():
            if change == "password changed":
                owner.set_password("a whole new password")
            else:
                owner.is_active = False
            owner.save()

        await sync_to_async(change_user)()
        closed = await socket.receive_output(timeout=5)
        await socket.wait()
        return closed

    assert closed_with(async_to_sync(scenario)()) == 4401


def test_an_unrelated_save_of_the_user_leaves_the_socket_open(owned):
    owner, conversation, _ = owned
    headers = session_headers(owner)

    async def scenario():
        from asgiref.sync import sync_to_async

        socket = communicator(conversation.pk, headers)
        await socket.connect()
        owner.first_name = "Ada"
        await sync_to_async(owner.save)()
        await sync_to_async(owner.save)(update_fields=["last_login"])
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": []})
        reply = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return reply

    assert async_to_sync(scenario)()["type"] == "exchanges"


def test_a_sync_on_a_session_that_ended_closes_the_socket(owned):
    owner, conversation, _ = owned
    headers = session_headers(owner)

    async def scenario():
        from asgiref.sync import sync_to_async
        from django.contrib.sessions.models import Session

        socket = communicator(conversation.pk, headers)
        await socket.connect()
        # The session disappears without any event (expired, cleared by hand).
        await sync_to_async(Session.objects.all().delete)()
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": []})
        closed = await socket.receive_output(timeout=5)
        await socket.wait()
        return closed

    assert closed_with(async_to_sync(scenario)()) == 4401


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost", True),
        ("http://localhost:80", True),
        ("http://localhost:8000", False),
        ("https://localhost", False),
        ("http://evil.example", False),
        ("null", False),
        ("", False),
    ],
)
def test_the_origin_must_be_the_sockets_own_scheme_host_and_port(owned, origin, allowed):
    owner, conversation, _ = owned
    assert connects(conversation.pk, session_headers(owner, origin)) is allowed


@pytest.mark.parametrize("how", ["deleted", "its event lost, then a change rendered"])
def test_deleting_the_conversation_closes_its_open_sockets(owned, how):
    owner, conversation, message = owned
    headers = session_headers(owner)

    def delete() -> None:
        from continuity.actions import conversation_delete
        from continuity.models import Conversation

        if how == "deleted":
            conversation_delete(conversation=conversation)
            return
        # Without its own event: the socket learns of it when it next renders.
        Conversation.objects.filter(pk=conversation.pk).delete()
        publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)

    async def scenario():
        from asgiref.sync import sync_to_async

        socket = communicator(conversation.pk, headers)
        assert (await socket.connect())[0]
        await sync_to_async(delete)()
        closed = await socket.receive_output(timeout=5)
        await socket.wait()
        return closed

    assert closed_with(async_to_sync(scenario)()) == 4404


def test_a_sync_also_sends_the_sidebar_with_a_title_given_before_the_socket_joined(owned):
    """The first reply's title, given between the page's rendering and the socket joining its
    owner's group, reached the header through the sync's status but not the sidebar."""
    owner, conversation, message = owned
    Conversation.objects.filter(pk=conversation.pk).update(title="Learn Italian")  # unpublished
    headers = session_headers(owner)

    async def scenario():
        socket = communicator(conversation.pk, headers)
        await socket.connect()
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": []})
        frames = [await socket.receive_json_from(timeout=5) for _ in range(2)]
        await socket.disconnect()
        return frames

    frames = async_to_sync(scenario)()
    sidebar = next(frame for frame in frames if frame["type"] == "conversations")
    assert "Learn Italian" in sidebar["html"]


def test_conversations_of_the_same_title_are_told_apart_in_the_sidebar(client):
    owner = UserFactory()
    twins = [ConversationFactory(owner=owner, title="Trip planning") for _ in range(2)]
    ConversationFactory(owner=owner, title="Something else")
    client.force_login(owner)
    page = client.get(f"/c/{twins[0].pk}/").content.decode()
    sidebar = page.split('id="conversation-list"')[1].split("</ul>")[0]
    assert sidebar.count("data-started") == 2  # each twin says when it was started
    entries = [entry for entry in sidebar.split("<li") if "Something else" in entry]
    assert entries and "data-started" not in entries[0]


def test_a_socket_that_ends_in_an_error_stops_counting_among_its_persons(owned, monkeypatch):
    """disconnect() does not run after an error in a handler: the socket must still leave its
    person's count, or a few such errors would lock them out of their conversations."""
    from chat.consumers import ConversationConsumer
    from chat.socket_counts import sockets_key
    from continuity.delivery import redis_client

    owner, conversation, _ = owned
    headers = session_headers(owner)

    async def broken_receive(self, text_data=None, bytes_data=None):
        raise RuntimeError("a handler's fault")

    monkeypatch.setattr(ConversationConsumer, "receive", broken_receive)

    async def scenario():
        socket = communicator(conversation.pk, headers)
        assert (await socket.connect())[0]
        counted = redis_client().zcard(sockets_key(owner.pk))
        await socket.send_json_to({"type": "sync", "after": 0, "waiting": []})
        with pytest.raises(RuntimeError):
            await socket.wait(timeout=5)
        return counted

    assert async_to_sync(scenario)() == 1
    assert redis_client().zcard(sockets_key(owner.pk)) == 0
