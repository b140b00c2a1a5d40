from __future__ import annotations

import uuid

import redis
from django.conf import settings

from continuity import celery_app
from continuity.delivery import broker

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
