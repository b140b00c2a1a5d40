"""The watchdog's sweeps, the worker start-up scan and the planned-shutdown handoff.

Sweeps select candidate ids and handle each one with a conditional update, so any number of
watchdogs and workers may run them at once.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Now

from ..database.clock import db_now_plus
from ..models import Conversation, CrashRecord, Handoff, Run
from .approvals import approvals_expire
from .attempts.failures import attempt_end, each_guarded, runs_reap
from .attempts.lease import waiting_messages
from .drains import conversation_enqueue, drains_waiting
from .heartbeats import stale_run_ids
from .redis_connection import redis_client
from .reminders import reminders_deliver
from .workers import current_incarnation, process_gone

logger = logging.getLogger(__name__)


def due_conversation_ids() -> list[int]:
    """Active conversations with waiting messages, no live attempt, no backoff to wait for and
    no drain waiting in the queue, whose last enqueue is older than the requeue threshold or
    predates the end of the backoff."""
    candidates = stalled_conversation_ids()
    waiting = drains_waiting(candidates)
    return [pk for pk in candidates if pk not in waiting]


def stalled_conversation_ids() -> list[int]:
    lost_before = db_now_plus(-timedelta(seconds=settings.CONTINUITY_REQUEUE_AFTER_SECONDS))
    has_waiting = Exists(waiting_messages(OuterRef("pk")).values("pk"))
    has_live_run = Exists(Run.objects.filter(conversation=OuterRef("pk"), state=Run.State.RUNNING))
    return list(
        Conversation.objects.filter(has_waiting, state=Conversation.State.ACTIVE)
        .exclude(has_live_run)
        .filter(Q(retry_at__isnull=True) | Q(retry_at__lte=Now()))
        .filter(
            Q(enqueued_at__isnull=True)
            | Q(enqueued_at__lt=lost_before)
            | Q(retry_at__isnull=False, enqueued_at__lt=F("retry_at"))
        )
        .values_list("pk", flat=True)
    )


def conversations_requeue(*, conversation_ids: list[int]) -> int:
    return each_guarded(
        conversation_ids,
        lambda conversation_id: conversation_enqueue(conversation_id=conversation_id) or True,
        "re-enqueue conversation",
    )


def broker_reachable() -> bool:
    try:
        return bool(redis_client().ping())
    except redis.RedisError:
        return False


def watchdog_tick(
    *, detected_by: str = CrashRecord.Detector.WATCHDOG, reap: bool = True
) -> dict[str, int]:
    """One sweep. `reap=False` right after the caller lost the database: attempts could not
    write their heartbeats meanwhile, so their rows look stale until they next beat."""
    stale = stale_run_ids(Run.objects.all()) if reap else []
    reaped = runs_reap(run_ids=stale, detected_by=detected_by)
    approvals_expire()  # before the due conversations are read: theirs go on now
    reminders_deliver()
    due = due_conversation_ids()
    if due and not broker_reachable():
        # Each send would wait out its publish retries: try them all on a later sweep instead.
        logger.warning("Broker unreachable: %s conversation(s) wait for the next sweep", len(due))
        due = []
    requeued = conversations_requeue(conversation_ids=due)
    if reaped or requeued:
        logger.info(
            "Watchdog: %s crashed attempt(s) reaped, %s conversation(s) re-enqueued",
            reaped,
            requeued,
        )
    return {"reaped": reaped, "requeued": requeued}


def worker_start_scan(*, node: str) -> dict[str, int]:
    """A node that starts cannot have live attempts yet: what earlier incarnations of its name
    left running on this host with a process that is gone is reaped at once, without waiting
    for the heartbeat TTL. Anything else (a live second worker misconfigured with the same
    name, another host) is left to the ordinary staleness check of the sweep that follows."""
    earlier = Run.objects.filter(state=Run.State.RUNNING, node=node).exclude(
        incarnation=current_incarnation()
    )
    dead = [pk for pk, worker in earlier.values_list("pk", "worker") if process_gone(worker)]
    reaped = runs_reap(
        run_ids=dead, detected_by=CrashRecord.Detector.WORKER_START, only_if_stale=False
    )
    result = watchdog_tick(detected_by=CrashRecord.Detector.WORKER_START)
    return {**result, "reaped": result["reaped"] + reaped}


def runs_interrupt(*, node: str, rounds: int = 3) -> int:
    """Planned shutdown of a node: this incarnation's attempts become interrupted (their
    heartbeats then stop them), each leaves a "planned shutdown" handoff for the next attempt, and
    their conversations are re-enqueued for the next worker.
    Asked again after marking: an attempt whose start committed meanwhile is caught too."""
    interrupted = 0
    for _ in range(rounds):
        running = list(
            Run.objects.filter(
                state=Run.State.RUNNING, node=node, incarnation=current_incarnation()
            ).values_list("pk", flat=True)
        )
        if not running:
            break
        for run_id in running:
            interrupted += attempt_end(
                run_id=run_id,
                state=Run.State.INTERRUPTED,
                error=f"Planned shutdown of worker {node}.",
                handoff_reason=Handoff.Reason.PLANNED_SHUTDOWN,
            )
    return interrupted
