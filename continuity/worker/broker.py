"""Celery's broker transport: kombu's Redis transport, with one client per channel.

kombu builds a new redis-py client for every command it sends outside its polling loop: each
send_task, and the worker's bookkeeping of each delivery and each ack. redis-py fills a table
of about 170 response callbacks for every client it builds, which took a sixth of a
send_task's CPU, three times per message. A client holds no connection of its own (each
command checks one out of the channel's pool) and may be shared between threads, so one per
channel serves them all. It is built again for a new pool: kombu replaces the pool after a
fork or a reconnect.
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _shared_client = None

    def _create_client(self, asynchronous=False):
        if asynchronous:  # the polling loop's own client, which kombu already keeps
            return super()._create_client(asynchronous=True)
        pool, client = self.pool, self._shared_client
        if client is None or client.connection_pool is not pool:
            client = self._shared_client = super()._create_client()
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
