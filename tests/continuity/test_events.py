"""Live-update publishing: one long-lived connection, never a wait, events in order."""

from __future__ import annotations

import socket
import time

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings as django_settings

from continuity.live.events import (
    publish_message_changed,
    publish_reply_chunk,
    publisher_close,
)


@pytest.fixture(autouse=True)
def fresh_publisher():
    publisher_close()
    yield
    publisher_close()


@pytest.fixture
def stalled_redis(settings):
    """A Redis address whose server accepts connections (the kernel completes them) and never
    answers a command."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        layers = django_settings.CHANNEL_LAYERS
        config = layers["default"]["CONFIG"]
        host = {**config["hosts"][0], "address": f"redis://127.0.0.1:{server.getsockname()[1]}/0"}
        settings.CHANNEL_LAYERS = {
            "default": {**layers["default"], "CONFIG": {**config, "hosts": [host]}}
        }
        settings.CONTINUITY_PUBLISH_TIMEOUT_SECONDS = 0.5
        yield


def connections_received() -> int:
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    return client.info("stats")["total_connections_received"]


def test_publishes_share_one_redis_connection():
    before = connections_received()
    for seq in range(50):
        publish_message_changed(conversation_id=1, message_id=seq)
    # One for the publisher, one for each `connections_received()` call.
    assert connections_received() - before <= 3


def test_a_stalled_redis_costs_one_short_timeout_and_raises_nothing(stalled_redis):
    started = time.monotonic()
    publish_message_changed(conversation_id=1, message_id=1)
    assert time.monotonic() - started < 1.5
    # The next ones are dropped without waiting: the reply goes on at full speed.
    started = time.monotonic()
    for seq in range(20):
        publish_message_changed(conversation_id=1, message_id=seq)
    assert time.monotonic() - started < 0.5


def test_a_publish_never_waits_and_events_go_out_in_order():
    publisher_close()
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conversation.77", channel)
    for seq in range(1, 101):
        publish_reply_chunk(conversation_id=77, message_id=1, run_id=1, seq=seq, text=".")

    async def receive_all() -> list[int]:
        return [(await layer.receive(channel))["seq"] for _ in range(100)]

    assert async_to_sync(receive_all)() == list(range(1, 101))
