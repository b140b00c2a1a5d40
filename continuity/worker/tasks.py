"""Celery adapters: take ids, call the engine."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from ..delivery import processing


# A database outage before the attempt begins is retried with backoff (up to ~10 min); an
# outage during the attempt is handled inside it. The watchdog re-enqueues whatever remains.
@shared_task(
    bind=True,
    name="continuity.drain_conversation",
    # Its failures in the worker's main process: a pool process's death is acted on there.
    Request="continuity.worker.pool:DrainRequest",
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_backoff_max=30,
    max_retries=20,
)
def drain_conversation(self, conversation_id: int, sequence: int | None = None) -> None:
    # `sequence` is read on receipt (signals.py): it orders drain markers, see inbox.
    processing.drain_conversation(conversation_id=conversation_id, node=self.request.hostname or "")
