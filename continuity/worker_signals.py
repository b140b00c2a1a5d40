"""Celery worker lifecycle: announce, recover at start-up, hand over on planned shutdown."""

from __future__ import annotations

import logging
import threading

from celery.signals import worker_ready, worker_shutdown, worker_shutting_down
from django.db import connection

from .heartbeats import WorkerHeartbeat
from .recovery import runs_interrupt, worker_start_scan
from .workers import worker_announce, worker_stopped

logger = logging.getLogger(__name__)
SHUTDOWN_HANDOFF_SECONDS = 15

_heartbeats: dict[str, WorkerHeartbeat] = {}


@worker_ready.connect
def on_worker_ready(sender, **kwargs) -> None:
    node = sender.hostname
    worker_announce(name=node)
    heartbeat = _heartbeats[node] = WorkerHeartbeat(node)
    heartbeat.start()
    result = worker_start_scan(node=node)
    logger.info("Worker %s ready; start-up recovery scan: %s", node, result)


@worker_shutting_down.connect
def on_worker_shutting_down(sender, sig=None, how=None, **kwargs) -> None:
    # Runs inside the main process's signal handler: do the database work on a thread with its
    # own connection, and bound the wait so a dead database cannot block the shutdown.
    def interrupt() -> None:
        try:
            count = runs_interrupt(node=sender)
            logger.info(
                "Worker %s shutting down (%s): %s attempt(s) interrupted", sender, how, count
            )
        finally:
            connection.close()

    thread = threading.Thread(target=interrupt, name="shutdown-handoff")
    thread.start()
    thread.join(SHUTDOWN_HANDOFF_SECONDS)


@worker_shutdown.connect
def on_worker_shutdown(sender, **kwargs) -> None:
    heartbeat = _heartbeats.pop(sender.hostname, None)
    if heartbeat is not None:
        heartbeat.stop()
    worker_stopped(name=sender.hostname)
