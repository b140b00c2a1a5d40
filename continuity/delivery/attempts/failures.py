"""An attempt that ends without a reply: given back (an interruption: a planned shutdown, a
database or model server outage), dead-lettered (a permanent error, attempts used up), the
conversation paused (a crash loop), or backed off; and the reaping of attempts whose worker
died."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import ExpressionWrapper
from django.db.models.functions import Now

from ...context.handoffs import (
    handoff_after_interruption,
)
from ...database.clock import db_now_plus
from ...errors import (
    DATABASE_LOST,
    MODEL_BUSY,
)
from ...live.events import publish_conversation_changed, publish_message_changed
from ...models import Conversation, CrashRecord, Handoff, Message, Run
from ..dead_letters import dead_letter_create
from ..drains import conversation_enqueue
from ..heartbeats import outages_noted, stale_before
from ..inbox import message_bump
from ..pauses import conversation_pause
from .locking import conversation_lock

logger = logging.getLogger(__name__)


CRASH_ERROR = "Heartbeat stopped: the worker process died or hung."


def backoff_delay(failures: int) -> timedelta:
    steps = settings.CONTINUITY_CRASH_BACKOFF_SECONDS
    return timedelta(seconds=steps[max(1, min(failures, len(steps))) - 1])


def crash_window_start() -> ExpressionWrapper:
    return db_now_plus(-timedelta(seconds=settings.CONTINUITY_CRASH_WINDOW_SECONDS))


def conversation_wait_for_model(*, conversation_id: int, seconds: float) -> None:
    """Its brain's model server is unavailable: nothing begins before its next try, which the
    watchdog's sweep sends; the page says why it waits."""
    Conversation.objects.filter(pk=conversation_id, state=Conversation.State.ACTIVE).update(
        retry_at=db_now_plus(timedelta(seconds=seconds)),
        waiting_for=Conversation.WaitingFor.MODEL,
    )
    transaction.on_commit(lambda: publish_conversation_changed(conversation_id=conversation_id))


def each_guarded(items: list[int], action, what: str) -> int:
    """Apply `action` to each id; one failing item is logged and must not stop the others."""
    done = 0
    for item in items:
        try:
            done += bool(action(item))
        except Exception:
            logger.exception("Could not %s %s", what, item)
    return done


def runs_reap(
    *, run_ids: list[int], detected_by: str, only_if_stale: bool = True, error: str = CRASH_ERROR
) -> int:
    """End these runs as crashed; those that lost the database (`outage_note`) as interrupted,
    which the message is not charged for, whatever the outage's length."""
    lost_database = outages_noted(run_ids)

    def reap(run_id: int) -> bool:
        if run_id in lost_database:
            return attempt_end(
                run_id=run_id,
                state=Run.State.INTERRUPTED,
                error=f"{DATABASE_LOST}: the attempt could not record its end.",
                only_if_stale=only_if_stale,
            )
        return attempt_end(
            run_id=run_id,
            state=Run.State.CRASHED,
            error=error,
            detected_by=detected_by,
            only_if_stale=only_if_stale,
        )

    return each_guarded(run_ids, reap, "reap run")


@transaction.atomic
def attempt_end(
    *,
    run_id: int,
    state: str,
    error: str,
    traceback: str = "",
    permanent: bool = False,
    detected_by: str = "",
    only_if_stale: bool = False,
    handoff_reason: str = "",
    wait: float | None = None,
    counted: bool = True,
) -> bool:
    """End a running attempt that did not produce a reply; False if it had already ended (or,
    with `only_if_stale`, if it has heartbeaten since it was judged dead). An interruption
    given back by a model server that failed: `wait`, the seconds until its next try;
    `counted`, whether it counts towards the message's cap of interruptions.

    Then exactly one of: give the attempt back (an interruption: planned shutdown or database
    outage), dead-letter the message (permanent error, attempts or interruptions used up), pause
    the conversation (crash loop), or back off.
    """
    conversation_id = Run.objects.filter(pk=run_id).values_list("conversation_id", flat=True)
    if not conversation_id or conversation_lock(conversation_id[0]) is None:
        return False
    running = Run.objects.filter(pk=run_id, state=Run.State.RUNNING)
    if only_if_stale:
        running = running.filter(heartbeat_at__lt=stale_before())
    if not running.update(state=state, ended_at=Now(), error=error, traceback=traceback):
        return False
    run = Run.objects.select_related("message", "conversation").get(pk=run_id)
    message, conversation = run.message, run.conversation
    logger.warning("Attempt %s of message %s ended %s: %s", run.pk, message.pk, state, error)
    if state == Run.State.CRASHED:
        CrashRecord.objects.create(
            conversation=conversation, message=message, run=run, detected_by=detected_by
        )
        handoff_reason = handoff_reason or Handoff.Reason.CRASH_RECOVERY
    if handoff_reason:
        handoff_after_interruption(run=run, reason=handoff_reason)
    if state == Run.State.INTERRUPTED:
        given_back = message_give_back(
            message=message, conversation=conversation, error=error, wait=wait, counted=counted
        )
        if given_back:
            return True
    elif permanent or message.attempts >= settings.CONTINUITY_MAX_ATTEMPTS:
        reason = error if permanent else f"Gave up after {message.attempts} attempts. {error}"
        dead_letter_create(message=message, reason=reason)
        return True
    else:
        message_bump(message_id=message.pk, state=Message.State.QUEUED)
        if conversation.state == Conversation.State.ACTIVE:
            conversation_back_off_or_pause(
                conversation=conversation,
                message=message,
                crashed=state == Run.State.CRASHED,
                error=error,
            )
    transaction.on_commit(
        lambda: publish_message_changed(conversation_id=conversation.pk, message_id=message.pk)
    )
    return True


def message_give_back(
    *,
    message: Message,
    conversation: Conversation,
    error: str,
    wait: float | None = None,
    counted: bool = True,
) -> bool:
    """An interruption is not the message's fault: it does not use up an attempt. It has its own
    cap, so a message that provokes restarts cannot loop forever; True if it dead-lettered it.
    A model server's outage (`counted` False) is nobody's doing here, and is not counted."""
    interruptions = message.interruptions + counted
    if interruptions > settings.CONTINUITY_MAX_INTERRUPTIONS:
        dead_letter_create(
            message=message, reason=f"Interrupted {message.interruptions} times. Last: {error}"
        )
        return True
    message_bump(
        message_id=message.pk,
        state=Message.State.QUEUED,
        attempts=message.attempts - 1,
        interruptions=interruptions,
    )
    if wait is not None:
        # The watchdog's sweep sends the drain once the server's next try has come.
        waited_for = Conversation.WaitingFor.MODEL
        if error.startswith(MODEL_BUSY):  # answering others: its next answer frees a slot
            waited_for = Conversation.WaitingFor.MODEL_BUSY
        Conversation.objects.filter(pk=conversation.pk).update(
            retry_at=db_now_plus(timedelta(seconds=wait)), waiting_for=waited_for
        )
        return False
    if error.startswith(DATABASE_LOST) and interruptions > 1:
        # A database that keeps going away is given time to settle. The first time, it is back
        # already (this give-back is written to it): after a failover the worker that saw its
        # connection die sends the drain itself, at once, rather than leave it to the
        # watchdog's sweep after a backoff (6-8 s after the kill, measured).
        Conversation.objects.filter(pk=conversation.pk).update(
            retry_at=db_now_plus(backoff_delay(interruptions - 1)),
            waiting_for=Conversation.WaitingFor.DATABASE,
        )
    conversation_enqueue(conversation_id=conversation.pk)
    return False


def conversation_back_off_or_pause(
    *, conversation: Conversation, message: Message, crashed: bool, error: str
) -> None:
    """Wait longer after each recent failure of this message; pause the conversation after too
    many recent unresolved crashes in a row: with no message answered at its first try since
    the first of them. A conversation that goes on answering is not in a crash loop, however
    often its workers are killed (a host that keeps losing processes, a run of deploys); one
    whose every message kills its first attempt is."""
    since = crash_window_start()
    unresolved = CrashRecord.objects.filter(
        conversation=conversation, resolved_at=None, detected_at__gte=since
    )
    if crashed and (answered := last_clean_answer(conversation.pk)) is not None:
        unresolved = unresolved.filter(detected_at__gt=answered)
    crashes = unresolved.count()
    if crashed and crashes >= settings.CONTINUITY_PAUSE_AFTER_CRASHES:
        conversation_pause(
            conversation=conversation,
            reason=f"{crashes} crashes within {settings.CONTINUITY_CRASH_WINDOW_SECONDS:g} s, "
            f"with no message answered at its first try between them; last: {error}",
        )
        return
    # Counted per message: a dead-lettered poison message must not make its successor wait long.
    failures = message.runs.filter(
        state__in=[Run.State.CRASHED, Run.State.FAILED], ended_at__gte=since
    ).count()
    Conversation.objects.filter(pk=conversation.pk).update(
        retry_at=db_now_plus(backoff_delay(failures)), waiting_for=""
    )


def last_clean_answer(conversation_id: int):
    """When the conversation's newest answer given at the first try was stored; None if none.
    Read only after a crash: the newest of the conversation's runs come first."""
    return (
        Run.objects.filter(conversation_id=conversation_id, state=Run.State.COMPLETED, attempt=1)
        .order_by("-id")
        .values_list("ended_at", flat=True)
        .first()
    )
