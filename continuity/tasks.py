"""Celery adapters: take ids, call the engine."""

from __future__ import annotations

from celery import shared_task

from . import processing


@shared_task(bind=True, name="continuity.drain_conversation")
def drain_conversation(self, conversation_id: int) -> None:
    processing.drain_conversation(conversation_id=conversation_id, node=self.request.hostname or "")
