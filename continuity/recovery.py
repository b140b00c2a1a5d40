"""The watchdog's sweeps, the worker start-up scan and the planned-shutdown handoff.

Sweeps select candidate ids and handle each one with a conditional update, so any number of
watchdogs and workers may run them at once.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from .attempts import attempt_end, pending_messages
from .heartbeats import heartbeat_ttl, keys_alive, run_key
from .inbox import conversation_enqueue
from .models import Conversation, CrashRecord, Run

logger = logging.getLogger(__name__)

CRASH_ERROR = "Heartbeat stopped: the worker process died or hung."


def stale_run_ids() -> list[int]:
    """Running attempts whose heartbeat is older than its TTL in the database and in Redis."""
    candidates = list(
        Run.objects.filter(
            state=Run.State.RUNNING, heartbeat_at__lt=timezone.now() - heartbeat_ttl()
        ).values_list("pk", flat=True)
    )
    alive = keys_alive([run_key(pk) for pk in candidates])
    return [pk for pk in candidates if run_key(pk) not in alive]


def runs_reap(*, run_ids: list[int], detected_by: str) -> int:
    reaped = 0
    for run_id in run_ids:
        reaped += attempt_end(
            run_id=run_id, state=Run.State.CRASHED, error=CRASH_ERROR, detected_by=detected_by
        )
    return reaped


def due_conversation_ids() -> list[int]:
    """Active conversations with pending messages, no live attempt and no backoff to wait for,
    whose last enqueue is older than the requeue threshold or predates the end of the backoff."""
    now = timezone.now()
    lost_before = now - timedelta(seconds=settings.CONTINUITY_REQUEUE_AFTER_SECONDS)
    has_pending = Exists(pending_messages(OuterRef("pk")).values("pk"))
    has_live_run = Exists(Run.objects.filter(conversation=OuterRef("pk"), state=Run.State.RUNNING))
    return list(
        Conversation.objects.filter(has_pending, state=Conversation.State.ACTIVE)
        .exclude(has_live_run)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))
        .filter(
            Q(enqueued_at__isnull=True)
            | Q(enqueued_at__lt=lost_before)
            | Q(retry_at__isnull=False, enqueued_at__lt=F("retry_at"))
        )
        .values_list("pk", flat=True)
    )


def conversations_requeue(*, conversation_ids: list[int]) -> int:
    for conversation_id in conversation_ids:
        conversation_enqueue(conversation_id=conversation_id)
    return len(conversation_ids)


def watchdog_tick(*, detected_by: str = CrashRecord.Detector.WATCHDOG) -> dict[str, int]:
    reaped = runs_reap(run_ids=stale_run_ids(), detected_by=detected_by)
    requeued = conversations_requeue(conversation_ids=due_conversation_ids())
    if reaped or requeued:
        logger.info(
            "Watchdog: %s crashed attempt(s) reaped, %s conversation(s) re-enqueued",
            reaped,
            requeued,
        )
    return {"reaped": reaped, "requeued": requeued}


def worker_start_scan(*, node: str) -> dict[str, int]:
    """A node that starts cannot have live attempts yet: whatever it still holds is from a
    previous incarnation that died, so reap it now instead of waiting for its heartbeat TTL."""
    previous = list(
        Run.objects.filter(state=Run.State.RUNNING, node=node).values_list("pk", flat=True)
    )
    reaped = runs_reap(run_ids=previous, detected_by=CrashRecord.Detector.WORKER_START)
    result = watchdog_tick(detected_by=CrashRecord.Detector.WORKER_START)
    return {**result, "reaped": result["reaped"] + reaped}


def runs_interrupt(*, node: str) -> int:
    """Planned shutdown of a node: its attempts become interrupted (their heartbeats then stop
    them) and their conversations are re-enqueued for the next worker."""
    interrupted = 0
    for run_id in Run.objects.filter(state=Run.State.RUNNING, node=node).values_list(
        "pk", flat=True
    ):
        interrupted += attempt_end(
            run_id=run_id,
            state=Run.State.INTERRUPTED,
            error=f"Planned shutdown of worker {node}.",
        )
    return interrupted
