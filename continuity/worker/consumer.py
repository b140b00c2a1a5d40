"""The worker's consumer: Celery's, asking for its broker again at most a second apart while the
broker is away. Named by the worker_consumer setting, and so imported before Django is set up:
nothing here may import a model."""

from __future__ import annotations

from functools import partial

from celery.worker.consumer import Consumer as CeleryConsumer

# kombu's default ladder waits 2 s, then 4 s, 6 s… up to 30 s between tries. A Redis primary
# that Sentinel replaces is named anew about 2.5 s after it died, and a restarted Redis answers
# within a second: asked again at most a second apart, the worker is back within a second of
# either, not at the ladder's next step (a failover took 4 s or 8 s, by when the switch fell).
RECONNECT = {"interval_start": 0.25, "interval_step": 0.25, "interval_max": 1.0}


class Consumer(CeleryConsumer):
    def ensure_connected(self, conn):
        conn.ensure_connection = partial(conn.ensure_connection, **RECONNECT)
        return super().ensure_connected(conn)
