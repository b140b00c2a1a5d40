"""The channel layer: channels-redis's, whose Redis connections keep their cancellations.

redis-py writes each command under `asyncio.wait_for(..., socket_timeout)`. On Python 3.11 that
wait_for returns the write's result, instead of raising, when its task is cancelled just as the
write completes (CPython gh-86296, fixed in 3.12): the cancellation is lost. A websocket
consumer cancelled at that moment (its server gives up on it, or a test's communicator) then
carries on: channels-redis's receive loop, cancelled mid-command, polls Redis for messages that
no one will read, and the consumer, which awaits it, never ends. The window is a command's
write; a new connection's handshake is a few of them in a row.
"""

from __future__ import annotations

import asyncio

from channels_redis.core import RedisChannelLayer
from channels_redis.utils import create_pool
from redis.asyncio.connection import Connection as RedisConnection
from redis.asyncio.sentinel import SentinelManagedConnection


class KeepsCancellation:
    async def send_packed_command(self, command, check_health: bool = True) -> None:
        task = asyncio.current_task()
        requested = task.cancelling() if task is not None else 0
        await super().send_packed_command(command, check_health)
        if task is not None and task.cancelling() > requested:
            # Cancelled during the write and not told: end as a cancellation during the write
            # does, without the reply, which the next command on this connection would read.
            await self.disconnect(nowait=True)
            raise asyncio.CancelledError


class Connection(KeepsCancellation, RedisConnection):
    pass


class SentinelConnection(KeepsCancellation, SentinelManagedConnection):
    """To the primary that the Sentinels name (REDIS_SENTINELS)."""


class ChannelLayer(RedisChannelLayer):
    """channels-redis's layer (CHANNEL_LAYERS's BACKEND), on connections that keep a
    cancellation: to the host's `address`, or to the primary its Sentinels name."""

    def create_pool(self, index: int):
        host = self.hosts[index]
        connection = SentinelConnection if "master_name" in host else Connection
        return create_pool({**host, "connection_class": connection})
