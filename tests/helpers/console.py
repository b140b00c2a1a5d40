"""Rows the console tests need, made through the services that make them in production."""

from __future__ import annotations

import uuid

from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.models import DeadLetter


def dead_letter_make(conversation, text: str = "Please summarize [[broken]]") -> DeadLetter:
    message = message_accept(conversation=conversation, text=text, client_id=uuid.uuid4())
    run = attempt_begin(conversation_id=conversation.pk)
    attempt_end(
        run_id=run.pk,
        state="failed",
        error="ValueError: the brain tripped over this message",
        traceback='Traceback (most recent call last):\n  File "brain.py", line 1\nValueError: x',
        permanent=True,
    )
    return DeadLetter.objects.get(message=message)
