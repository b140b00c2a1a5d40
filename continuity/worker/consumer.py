"""The worker's consumer: Celery's, asking for its broker again at most a second apart while the
broker is away, and without the steps nothing here uses (mingle, gossip). Named by the
worker_consumer setting, and so imported before Django is set up: nothing here may import a
model."""

from __future__ import annotations

from functools import partial

from celery.worker.consumer import Consumer as CeleryConsumer

# kombu's default ladder waits 2 s, then 4 s, 6 s… up to 30 s between tries. A Redis primary
# that Sentinel replaces is named anew about 2.5 s after it died, and a restarted Redis answers
# within a second: asked again at most a second apart, the worker is back within a second of
# either, not at the ladder's next step (a failover took 4 s or 8 s, by when the switch fell).
RECONNECT = {"interval_start": 0.25, "interval_step": 0.25, "interval_max": 1.0}


# Mingle asks the other workers for the tasks they revoked and waits a second for their answers,
# at every start; gossip listens to every other worker's events. Nothing here revokes a task,
# and workers learn of each other through the database (heartbeats): neither is used, and the
# second mingle waited was a second more before a restarted worker took its first message.
# (As `celery worker --without-mingle --without-gossip`, for every way a worker is started.)
UNUSED_STEPS = {"without_mingle": True, "without_gossip": True}


class Consumer(CeleryConsumer):
    def __init__(self, *args, worker_options=None, **kwargs):
        super().__init__(*args, worker_options={**(worker_options or {}), **UNUSED_STEPS}, **kwargs)

    def ensure_connected(self, conn):
        conn.ensure_connection = partial(conn.ensure_connection, **RECONNECT)
        return super().ensure_connected(conn)
