"""Celery worker lifecycle: announce, recover at start-up, hand over on planned shutdown."""

from __future__ import annotations

import logging
import threading

from celery.signals import (
    task_postrun,
    task_prerun,
    task_received,
    worker_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from django.db import DatabaseError, InterfaceError, close_old_connections, connection

from ..brains import brains_import
from ..delivery.backends import backends_check
from ..delivery.drains import drain_received
from ..delivery.heartbeats import WorkerHeartbeat
from ..delivery.watchdog import runs_interrupt, worker_start_scan
from ..delivery.workers import (
    incarnation_begin,
    worker_announce,
    worker_stopped,
    worker_stopping_mark,
)
from ..live.events import publisher_flush
from ..tools import tools_ready
from .control import continuity_shutdown  # noqa: F401  (registers the control command)

logger = logging.getLogger(__name__)
SHUTDOWN_HANDOFF_SECONDS = 15

_heartbeats: dict[str, WorkerHeartbeat] = {}


@worker_init.connect
def on_worker_init(sender, **kwargs) -> None:
    # Before the pool is forked, so every pool process inherits this start's id, the brains'
    # modules and the MCP SDK (not imported inside an attempt's locked span).
    incarnation_begin()
    brains_import()
    tools_ready()


@worker_process_shutdown.connect
def on_worker_process_shutdown(**kwargs) -> None:
    # Pool processes end without running atexit: send the live updates already handed over.
    publisher_flush()


@task_prerun.connect
@task_postrun.connect
def on_task_run(**kwargs) -> None:
    # Django's request_started / request_finished: drop connections that are too old or broken
    # (settings CELERY_DB_REUSE_MAX); a kept one is health-checked at its next use.
    close_old_connections()


@task_received.connect
def on_task_received(sender, request, **kwargs) -> None:
    # The drain left the queue: the next enqueue may send another. Cleared on receipt, not at
    # start: a drain reserved by a worker that then dies would otherwise hold its marker (and
    # the conversation) until the marker expires, while the broker keeps the task unacked.
    sequence = (request.kwargs or {}).get("sequence")
    if request.name == "continuity.drain_conversation" and request.args and sequence:
        drain_received(conversation_id=request.args[0], sequence=sequence)


@worker_ready.connect
def on_worker_ready(sender, **kwargs) -> None:
    node = sender.hostname
    close_old_connections()
    worker_announce(name=node)
    heartbeat = _heartbeats[node] = WorkerHeartbeat(node)
    heartbeat.start()
    result = worker_start_scan(node=node)
    logger.info("Worker %s ready; start-up recovery scan: %s", node, result)
    threading.Thread(target=with_own_connection(backends_check), daemon=True).start()


def with_own_connection(work):
    """`work` on a thread of its own, whose database connection is closed after it."""

    def run() -> None:
        try:
            work()
        except Exception:
            logger.exception("%s failed", work.__name__)
        finally:
            connection.close()

    return run


@worker_shutting_down.connect
def on_worker_shutting_down(sender, sig=None, how=None, **kwargs) -> None:
    # Runs inside the main process's signal handler: do the database work on a daemon thread
    # with its own connection, and bound the wait, so neither a dead database nor a held lock
    # can keep the process from exiting.
    def interrupt() -> None:
        worker_stopping_mark(node=sender)  # first: no attempt may begin after the handover
        try:
            count = runs_interrupt(node=sender)
            logger.info(
                "Worker %s shutting down (%s): %s attempt(s) interrupted", sender, how, count
            )
        except (DatabaseError, InterfaceError):
            logger.exception("Worker %s could not hand over its attempts", sender)
        finally:
            connection.close()

    thread = threading.Thread(target=interrupt, name="shutdown-handoff", daemon=True)
    thread.start()
    thread.join(SHUTDOWN_HANDOFF_SECONDS)


@worker_shutdown.connect
def on_worker_shutdown(sender, **kwargs) -> None:
    heartbeat = _heartbeats.pop(sender.hostname, None)
    if heartbeat is not None:
        heartbeat.stop()
    close_old_connections()  # the connection may predate a database restart
    try:
        worker_stopped(name=sender.hostname)
    except (DatabaseError, InterfaceError):
        logger.exception("Worker %s could not record that it stopped", sender.hostname)
