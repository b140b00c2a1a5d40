"""Attempt lifecycle: begin (take the conversation's lease), finish, or end unsuccessfully.

The running Run row is the conversation's lease (a partial unique index allows one per
conversation) and its id is the fencing token: every write of an attempt first locks its row and
checks that it is still running, so an attempt that was reaped or interrupted cannot write.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .conversations import conversation_pause
from .dead_letters import dead_letter_create
from .errors import AttemptStopped
from .events import publish_message_changed
from .faults import fault_point
from .heartbeats import run_is_stale
from .inbox import conversation_enqueue, message_bump
from .models import Conversation, CrashRecord, Message, Run

logger = logging.getLogger(__name__)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def backoff_delay(failed_attempts: int) -> timedelta:
    steps = settings.CONTINUITY_CRASH_BACKOFF_SECONDS
    return timedelta(seconds=steps[min(failed_attempts, len(steps)) - 1])


def pending_messages(conversation_id: int):
    return Message.objects.filter(
        conversation_id=conversation_id,
        role=Message.Role.USER,
        state__in=Message.PENDING_STATES,
    ).order_by("id")


def attempt_begin(*, conversation_id: int, node: str = "") -> Run | None:
    """Start an attempt on the conversation's oldest pending message, or None when there is
    nothing to do now (paused, backing off, empty, or another live attempt holds the lease)."""
    now = timezone.now()
    with transaction.atomic():
        conversation = Conversation.objects.select_for_update().filter(pk=conversation_id).first()
        if conversation is None or conversation.state != Conversation.State.ACTIVE:
            return None
        holder = conversation.runs.filter(state=Run.State.RUNNING).first()
        if holder is not None:
            if run_is_stale(holder, now):
                attempt_end(
                    run_id=holder.pk,
                    state=Run.State.CRASHED,
                    error="Heartbeat stopped: the worker process died or hung.",
                    detected_by=CrashRecord.Detector.DRAIN,
                )
            return None
        if conversation.retry_at and conversation.retry_at > now:
            return None
        message = pending_messages(conversation_id).first()
        if message is None:
            return None
        attempt = message.attempts + 1
        # Committed before any work, so an attempt that dies still counts (poison detection).
        message_bump(message_id=message.pk, attempts=attempt, state=Message.State.PROCESSING)
        run = Run.objects.create(
            conversation=conversation,
            message=message,
            attempt=attempt,
            node=node,
            worker=worker_identity(),
            heartbeat_at=now,
        )
        transaction.on_commit(
            lambda: publish_message_changed(conversation_id=conversation_id, message_id=message.pk)
        )
    return run


def run_lock_owned(run: Run) -> None:
    """Inside a transaction: hold the run's row and make sure this attempt still owns it."""
    if not Run.objects.select_for_update().filter(pk=run.pk, state=Run.State.RUNNING).exists():
        raise AttemptStopped(f"Run {run.pk} no longer owns message {run.message_id}.")


def attempt_finish(*, run: Run, reply_text: str) -> Message:
    """Store the reply, mark the message done and the run completed, in one transaction."""
    now = timezone.now()
    with transaction.atomic():
        run_lock_owned(run)
        reply = Message.objects.create(
            conversation_id=run.conversation_id,
            role=Message.Role.ASSISTANT,
            text=reply_text,
            state=Message.State.DONE,
            reply_to_id=run.message_id,
        )
        message_bump(message_id=run.message_id, state=Message.State.DONE)
        Run.objects.filter(pk=run.pk).update(state=Run.State.COMPLETED, ended_at=now)
        Conversation.objects.filter(pk=run.conversation_id).update(retry_at=None, updated_at=now)
        if pending_messages(run.conversation_id).exclude(pk=run.message_id).exists():
            conversation_enqueue(conversation_id=run.conversation_id)
        transaction.on_commit(
            lambda: publish_message_changed(
                conversation_id=run.conversation_id, message_id=run.message_id
            )
        )
    fault_point("after_reply_committed")
    return reply


@transaction.atomic
def attempt_end(
    *,
    run_id: int,
    state: str,
    error: str,
    traceback: str = "",
    permanent: bool = False,
    detected_by: str = "",
) -> bool:
    """End a running attempt that did not produce a reply; False if it had already ended.

    Then exactly one of: give the attempt back (planned interruption), dead-letter the message
    (permanent error or attempts used up), pause the conversation (crash loop), or back off.
    """
    now = timezone.now()
    ended = Run.objects.filter(pk=run_id, state=Run.State.RUNNING).update(
        state=state, ended_at=now, error=error, traceback=traceback
    )
    if not ended:
        return False
    run = Run.objects.select_related("message", "conversation").get(pk=run_id)
    message, conversation = run.message, run.conversation
    logger.warning("Run %s of message %s ended %s: %s", run.pk, message.pk, state, error)
    if state == Run.State.CRASHED:
        CrashRecord.objects.create(
            conversation=conversation, message=message, run=run, detected_by=detected_by
        )
    if state == Run.State.INTERRUPTED:
        # A planned shutdown is not the message's fault: it does not use up an attempt.
        message_bump(
            message_id=message.pk, state=Message.State.QUEUED, attempts=message.attempts - 1
        )
        conversation_enqueue(conversation_id=conversation.pk)
    elif permanent or message.attempts >= settings.CONTINUITY_MAX_ATTEMPTS:
        reason = error if permanent else f"Gave up after {message.attempts} attempts. {error}"
        dead_letter_create(message=message, reason=reason)
        return True
    else:
        message_bump(message_id=message.pk, state=Message.State.QUEUED)
        crashes = CrashRecord.objects.filter(
            conversation=conversation,
            resolved_at=None,
            detected_at__gte=now - timedelta(seconds=settings.CONTINUITY_CRASH_WINDOW_SECONDS),
        ).count()
        if state == Run.State.CRASHED and crashes >= settings.CONTINUITY_PAUSE_AFTER_CRASHES:
            conversation_pause(
                conversation=conversation,
                reason=f"{crashes} crashes within {settings.CONTINUITY_CRASH_WINDOW_SECONDS:g} s; "
                f"last: {error}",
            )
        else:
            Conversation.objects.filter(pk=conversation.pk).update(
                retry_at=now + backoff_delay(message.attempts)
            )
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    )
    return True
