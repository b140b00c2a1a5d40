from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import redis
from django.conf import settings

from continuity import celery_app
from continuity.worker import broker

TASK = "continuity.tests.never_run"


def queued(queue: str) -> int:
    return redis.Redis.from_url(settings.REDIS_URL).llen(queue)


def test_a_broker_channel_shares_one_redis_client_until_kombu_replaces_its_pool():
    queue = f"continuity-test-{uuid.uuid4().hex}"
    with celery_app.connection_for_write() as connection:
        channel = connection.default_channel
        assert isinstance(channel, broker.Channel)
        producer = connection.Producer(channel)

        celery_app.send_task(TASK, queue=queue, producer=producer)
        client = channel._shared_client
        celery_app.send_task(TASK, queue=queue, producer=producer)
        assert client is not None and channel._shared_client is client
        assert queued(queue) == 2

        # What kombu does after a fork: the old pool's connections belong to the parent.
        channel._disconnect_pools()
        celery_app.send_task(TASK, queue=queue, producer=producer)
        assert channel._shared_client is not client
        assert channel._shared_client.connection_pool is channel.pool
        assert queued(queue) == 3
    redis.Redis.from_url(settings.REDIS_URL).delete(queue)


@pytest.mark.parametrize(
    ("url", "transport", "tls"),
    [
        ("redis://127.0.0.1:6379/0", "continuity.worker.broker.Transport", False),
        # Naming a transport would override the scheme, and with it TLS.
        ("rediss://:secret@redis.example:6380/0", "kombu.transport.redis.Transport", True),
    ],
)
@pytest.mark.processes
def test_only_a_plain_redis_broker_takes_the_shared_client_transport(url, transport, tls):
    shown = subprocess.run(
        [sys.executable, "-c", BROKER_OF_SETTINGS],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "continuity.settings", "REDIS_URL": url},
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [transport, str(tls)]


# The production settings' broker connection, not connected: its transport class and TLS.
BROKER_OF_SETTINGS = """
import django
django.setup()
from continuity import celery_app
connection = celery_app.connection_for_write()
transport = type(connection.transport)
print(f"{transport.__module__}.{transport.__qualname__}", bool(connection.ssl))
"""


def test_the_drain_task_keeps_its_name_so_drains_queued_by_an_earlier_release_run():
    """Drains in the broker's queue name their task: one sent by the release before a deploy
    (when the task lived in continuity.delivery.tasks) is run by this release's worker."""
    from continuity.delivery.drains import DRAIN_TASK
    from continuity.worker import tasks  # as the worker's autodiscovery imports it

    assert DRAIN_TASK == tasks.drain_conversation.name == "continuity.drain_conversation"
    assert celery_app.tasks[DRAIN_TASK].run.__module__ == "continuity.worker.tasks"
