"""Rows the console tests need, made through the services that make them in production."""

from __future__ import annotations

from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.models import DeadLetter
from tests.helpers.messages import send


def dead_letter_make(
    conversation,
    text: str = "Please summarize [[broken]]",
    *,
    error: str = "ValueError: the brain tripped over this message",
    traceback: str = 'Traceback (most recent call last):\n  File "brain.py", line 1\nValueError: x',
) -> DeadLetter:
    """A message dead-lettered at its first attempt, failed with `error` (a permanent one)."""
    message = send(conversation, text)
    run = attempt_begin(conversation_id=conversation.pk)
    attempt_end(run_id=run.pk, state="failed", error=error, traceback=traceback, permanent=True)
    return DeadLetter.objects.get(message=message)
