"""Retention: step checkpoints and streamed chunks are working state, not history.

Once a message is final (done or dead) its reply or dead letter holds what matters, so the
working state of its finished attempts is pruned after the retention period.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from .models import Checkpoint, Message, ReplyChunk, Run

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
