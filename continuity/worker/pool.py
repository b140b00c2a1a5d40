"""A pool process's death, acted on as soon as its worker's main process learns of it.

A SIGKILLed pool process never reaches an `except`, and its heartbeat thread dies with it: the
watchdog would see its attempt only once the heartbeat went stale. But the main process knows
at once (billiard reaps its child and logs the signal). At its next check of the pool after
`worker_lost_wait` (settings: CELERY_WORKER_LOST_WAIT), Celery fails the job with
WorkerLostError, in the main process, through the task's Request. There, the attempt that
process ran is ended crashed through the watchdog's fenced path (so the crash counter, backoff
and pause apply as for any crash), and the conversation's next drain is sent when its backoff
ends rather than at a later sweep.

Celery's pool checks on its processes every 5 s, so a death could go unacted on for that long:
the worker's pool (`prefork.py`) checks every 0.25 s.
"""

from __future__ import annotations

import logging
import socket
import threading

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import WorkerLostError
from celery.worker.request import Request
from django.db import DatabaseError, InterfaceError, connection
from django.db.models import F, Max
from django.db.models.functions import Now

from ..delivery.attempts.failures import runs_reap
from ..delivery.drains import conversation_enqueue
from ..delivery.workers import current_incarnation
from ..models import Conversation, CrashRecord, Run

logger = logging.getLogger(__name__)


class DrainRequest(Request):
    """The drain task's request in the worker's main process."""

    def on_failure(self, exc_info, send_failed_event=True, return_ok=False):
        error = exc_info.exception
        if isinstance(error, ExceptionWithTraceback):
            error = error.exc
        if isinstance(error, WorkerLostError) and self.worker_pid:
            # On a thread: the main process's event loop must not wait for the database.
            threading.Thread(
                target=pool_process_died,
                kwargs={"node": self.hostname, "pid": self.worker_pid, "error": str(error)},
                name=f"pool-death-{self.worker_pid}",
                daemon=True,
            ).start()
        return super().on_failure(exc_info, send_failed_event, return_ok)


def pool_process_died(*, node: str, pid: int, error: str) -> int:
    """End the attempts the dead process `pid` of this node ran; then send each conversation's
    next drain when its backoff ends. The number of attempts ended."""
    try:
        runs = Run.objects.filter(
            state=Run.State.RUNNING,
            node=node,
            incarnation=current_incarnation(),
            worker=f"{socket.gethostname()}:{pid}",
        )
        dead = dict(runs.values_list("pk", "conversation_id"))
        ended = runs_reap(
            run_ids=list(dead),
            detected_by=CrashRecord.Detector.POOL,
            only_if_stale=False,
            error=f"The worker process died. {error}",
        )
        for conversation_id in set(dead.values()):
            drain_after_backoff(conversation_id=conversation_id)
        if ended:
            logger.warning("Pool process %s of %s died: %s attempt(s) ended", pid, node, ended)
        return ended
    except (DatabaseError, InterfaceError):
        # The watchdog reaps it once its heartbeat is stale.
        logger.exception("Could not end the attempts of dead pool process %s of %s", pid, node)
        return 0
    finally:
        connection.close()


def drain_after_backoff(*, conversation_id: int) -> None:
    """Send the conversation's drain when its backoff ends, on the database's clock. If this
    process is gone by then, the watchdog's sweep sends it."""
    waits = Conversation.objects.filter(
        pk=conversation_id, state=Conversation.State.ACTIVE, retry_at__isnull=False
    ).aggregate(seconds=Max(F("retry_at") - Now()))["seconds"]
    if waits is None:
        return  # paused, dead-lettered or given back: nothing to send, or sent already
    timer = threading.Timer(max(waits.total_seconds(), 0.0), drain_send_now, [conversation_id])
    timer.daemon = True
    timer.start()


def drain_send_now(conversation_id: int) -> None:
    try:
        conversation_enqueue(conversation_id=conversation_id)  # no transaction: sent at once
    except (DatabaseError, InterfaceError):
        logger.exception("Could not send the drain of conversation %s", conversation_id)
    finally:
        connection.close()
