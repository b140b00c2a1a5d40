"""Live-update publishing: one long-lived connection, bounded waits, and no swallowed limits."""

from __future__ import annotations

import signal
import socket
import time

import pytest
import redis
from billiard.exceptions import SoftTimeLimitExceeded
from django.conf import settings as django_settings

from continuity.live.events import publish_message_changed, publisher_close


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


@pytest.fixture
def soft_time_limit_in(request):
    """Raise SoftTimeLimitExceeded from a signal handler, as billiard does in a pool process."""

    def arm(seconds: float) -> None:
        previous = signal.signal(signal.SIGALRM, limit_reached)
        request.addfinalizer(lambda: signal.signal(signal.SIGALRM, previous))
        request.addfinalizer(lambda: signal.setitimer(signal.ITIMER_REAL, 0))
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def limit_reached(*_):
        raise SoftTimeLimitExceeded()

    return arm


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


def test_a_soft_time_limit_during_a_publish_reaches_the_task(stalled_redis, soft_time_limit_in):
    started = time.monotonic()
    soft_time_limit_in(0.2)
    with pytest.raises(SoftTimeLimitExceeded):
        publish_message_changed(conversation_id=1, message_id=1)
    assert time.monotonic() - started < 0.9  # not after the publish gave up by itself
