"""Retention: step checkpoints and streamed chunks are working state, not history.

Once a message is final (done or dead) its reply or dead letter holds what matters, so the
working state of its finished attempts is pruned after the retention period. The history of
attempts, crashes, alerts and dead letters is kept longer, then pruned too: no table grows
forever.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from importlib import import_module

from django.conf import settings
from django.utils import timezone

from ..models import Alert, Checkpoint, CrashRecord, DeadLetter, Message, ReplyChunk, Run, Worker

logger = logging.getLogger(__name__)
FINAL_STATES = (Message.State.DONE, Message.State.DEAD)


def working_state_prune(*, older_than_days: float | None = None) -> dict[str, int]:
    days = (
        settings.CONTINUITY_CHECKPOINT_RETENTION_DAYS
        if older_than_days is None
        else older_than_days
    )
    cutoff = timezone.now() - timedelta(days=days)
    checkpoints, _ = Checkpoint.objects.filter(
        message__state__in=FINAL_STATES, created_at__lt=cutoff
    ).delete()
    chunks, _ = (
        ReplyChunk.objects.filter(created_at__lt=cutoff)
        .exclude(run__state=Run.State.RUNNING)
        .delete()
    )
    if checkpoints or chunks:
        logger.info(
            "Pruned %s checkpoint(s) and %s reply chunk(s) older than %g days",
            checkpoints,
            chunks,
            days,
        )
    return {"checkpoints": checkpoints, "chunks": chunks}


def history_prune(*, older_than_days: float | None = None) -> dict[str, int]:
    """Attempt history, crash records, handled alerts and dead letters, departed workers and
    expired sessions, past the history retention period. Dead letters still waiting for staff,
    and the attempts behind them, are kept whatever their age."""
    days = (
        settings.CONTINUITY_HISTORY_RETENTION_DAYS if older_than_days is None else older_than_days
    )
    cutoff = timezone.now() - timedelta(days=days)
    waiting = DeadLetter.objects.filter(status=DeadLetter.Status.PENDING).values("message_id")
    pruned = {
        # A run that wrote a handoff stays: it tells whether that handoff is on a hidden
        # branch (without it, a left-behind branch's notes would come back into the context).
        "runs": Run.objects.filter(message__state__in=FINAL_STATES, ended_at__lt=cutoff)
        .exclude(message_id__in=waiting)
        .exclude(handoffs__isnull=False)
        .delete()[1]
        .get("continuity.Run", 0),
        "crash_records": CrashRecord.objects.filter(resolved_at__lt=cutoff)
        .exclude(message_id__in=waiting)
        .delete()[0],
        "alerts": Alert.objects.filter(acknowledged_at__lt=cutoff).delete()[0],
        # Counted alone: its alert, if still there, goes with it.
        "dead_letters": DeadLetter.objects.exclude(status=DeadLetter.Status.PENDING)
        .filter(created_at__lt=cutoff)
        .delete()[1]
        .get("continuity.DeadLetter", 0),
        "workers": Worker.objects.filter(last_seen_at__lt=cutoff).delete()[0],
    }
    import_module(settings.SESSION_ENGINE).SessionStore.clear_expired()
    if any(pruned.values()):
        logger.info("Pruned history older than %g days: %s", days, pruned)
    return pruned


def retention_prune() -> dict[str, int]:
    """Everything the retention rules remove; the watchdog runs it periodically."""
    return {**working_state_prune(), **history_prune()}
