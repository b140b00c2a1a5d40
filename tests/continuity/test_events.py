"""Live-update publishing: one long-lived connection, never a wait, events in order."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings as django_settings

from continuity.live.events import (
    publish_message_changed,
    publish_reply_chunk,
    publisher,
    publisher_close,
    publisher_flush,
)
from tests.helpers.processes import process_env


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


def test_every_page_of_a_conversation_gets_every_event_in_order():
    layer = get_channel_layer()
    pages = [async_to_sync(layer.new_channel)() for _ in range(2)]
    for page in pages:
        async_to_sync(layer.group_add)("conversation.78", page)
    for seq in range(1, 51):
        publish_reply_chunk(conversation_id=78, message_id=1, run_id=1, seq=seq, text=".")

    async def receive_all(page: str) -> list[int]:
        return [(await layer.receive(page))["seq"] for _ in range(50)]

    for page in pages:
        assert async_to_sync(receive_all)(page) == list(range(1, 51))


def test_a_change_of_a_message_drops_its_earlier_events_of_the_same_batch():
    layer = get_channel_layer()
    page = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conversation.81", page)

    def changed(message_id: int) -> tuple[str, dict]:
        return "conversation.81", {"type": "message.changed", "message_id": message_id}

    def chunk(message_id: int, seq: int) -> tuple[str, dict]:
        event = {"type": "reply.chunk", "message_id": message_id, "run_id": 1, "seq": seq}
        return "conversation.81", {**event, "text": "."}

    publisher().deliver(
        [changed(1), chunk(1, 1), changed(2), chunk(1, 2), changed(1), chunk(1, 3), chunk(2, 1)]
    )

    received = async_to_sync(received_until_quiet)(layer, page)
    assert [(e["type"], e["message_id"], e.get("seq")) for e in received] == [
        ("message.changed", 2, None),
        ("message.changed", 1, None),
        ("reply.chunk", 1, 3),
        ("reply.chunk", 2, 1),
    ]


def test_a_page_that_reads_nothing_keeps_only_as_many_events_as_its_capacity(settings):
    layers = django_settings.CHANNEL_LAYERS
    settings.CHANNEL_LAYERS = {
        "default": {**layers["default"], "CONFIG": {**layers["default"]["CONFIG"], "capacity": 3}}
    }
    layer = get_channel_layer()
    page = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conversation.79", page)
    for seq in range(1, 6):
        publish_reply_chunk(conversation_id=79, message_id=1, run_id=1, seq=seq, text=".")
    publisher_flush(timeout=5)

    received = async_to_sync(received_until_quiet)(layer, page)
    assert [event["seq"] for event in received] == [1, 2, 3]


def test_an_event_that_cannot_be_sent_is_dropped_and_the_others_go_out():
    from continuity.live.events import group_publish

    layer = get_channel_layer()
    page = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conversation.80", page)
    publish_reply_chunk(conversation_id=80, message_id=1, run_id=1, seq=1, text=".")
    group_publish("conversation.80", {"type": "reply.chunk", "seq": object()})  # not msgpack
    publish_reply_chunk(conversation_id=80, message_id=1, run_id=1, seq=3, text=".")

    async def receive() -> list[int]:
        async with asyncio.timeout(5):
            return [(await layer.receive(page))["seq"] for _ in range(2)]

    assert async_to_sync(receive)() == [1, 3]


async def received_until_quiet(layer, page: str) -> list[dict]:
    """Every event the page receives until none comes for half a second, once the first came
    (within 5 s: the page's first receive connects to Redis, which a loaded machine may take
    longer than half a second to do; a full SQLite run once received nothing)."""
    received = []
    with contextlib.suppress(TimeoutError):
        while True:
            async with asyncio.timeout(0.5 if received else 5):
                received.append(await layer.receive(page))
    return received


def test_a_receive_cancelled_at_any_point_of_its_first_commands_ends():
    """A page's receive, cancelled (its socket closed, its consumer cancelled) at any turn of
    the event loop while its new connection says hello and it sends its first commands, ends
    at once. On Python 3.11 redis-py's write under asyncio.wait_for lost a cancellation that
    came as the write completed: the receive polled Redis forever and its consumer never ended
    (continuity.live.layer)."""
    from continuity.live.layer import ChannelLayer

    async def cancelled_after(turns: int) -> bool:
        layer = ChannelLayer(**django_settings.CHANNEL_LAYERS["default"]["CONFIG"])
        receive = asyncio.ensure_future(layer.receive(await layer.new_channel()))
        for _ in range(turns):
            await asyncio.sleep(0)
        receive.cancel()
        # A cancelled receive ends in the same turn; one that lost it would wait out BZPOPMIN.
        await asyncio.wait([receive], timeout=10)
        ended = receive.done()
        receive.cancel()  # one that lost it hears a second cancellation in BZPOPMIN
        await asyncio.wait([receive], timeout=10)
        await layer.flush()
        return ended

    async def hung() -> list[int]:
        return [turns for turns in range(40) if not await cancelled_after(turns)]

    assert async_to_sync(hung)() == []


# A process on a host whose clock is off by argv[1] seconds: Python's clock is what it would
# read there (Debian's libfaketime hangs Python 3.11's time.sleep, so the clock is set here).
SKEWED_PUBLISH = """
import sys, time
real = time.time
time.time = lambda: real() + float(sys.argv[1])
import django
django.setup()
from continuity.live.events import publish_reply_chunk, publisher_flush
publish_reply_chunk(
    conversation_id=int(sys.argv[2]), message_id=1, run_id=1, seq=int(sys.argv[3]), text="."
)
publisher_flush(timeout=10)
"""


def publish_from_a_host_whose_clock_is_off(seconds: float, *, conversation_id: int, seq: int):
    subprocess.run(
        [sys.executable, "-c", SKEWED_PUBLISH, str(seconds), str(conversation_id), str(seq)],
        env=process_env(),
        cwd=django_settings.BASE_DIR,
        check=True,
        timeout=60,
    )


@pytest.mark.processes
@pytest.mark.django_db
def test_events_from_hosts_whose_clocks_are_two_minutes_off_all_arrive_in_order():
    """Before, a score was the sending host's clock: one running behind had its events trimmed
    as expired by the next publish of a host with the right time, and one running ahead had
    its events read after those sent later."""
    layer = get_channel_layer()
    page = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("conversation.79", page)
    publish_from_a_host_whose_clock_is_off(-120, conversation_id=79, seq=1)
    publish_reply_chunk(conversation_id=79, message_id=1, run_id=1, seq=2, text=".")
    publisher_flush(timeout=10)
    publish_from_a_host_whose_clock_is_off(120, conversation_id=79, seq=3)
    publish_reply_chunk(conversation_id=79, message_id=1, run_id=1, seq=4, text=".")
    publisher_flush(timeout=10)

    received = async_to_sync(received_until_quiet)(layer, page)
    assert [event["seq"] for event in received] == [1, 2, 3, 4]
