"""Celery adapters: take ids, call the engine."""

from __future__ import annotations

from celery import shared_task

from . import processing
from .inbox import drain_started


@shared_task(bind=True, name="continuity.drain_conversation")
def drain_conversation(self, conversation_id: int) -> None:
    drain_started(conversation_id=conversation_id)
    processing.drain_conversation(conversation_id=conversation_id, node=self.request.hostname or "")
