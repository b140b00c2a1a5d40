"""An attempt that ends without a reply: given back (an interruption: a planned shutdown, a
database or model server outage), dead-lettered (a permanent error, attempts used up), the
conversation paused (a crash loop), or backed off; and the reaping of attempts whose worker
died."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from functools import partial
from threading import Event

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import ExpressionWrapper
from django.db.models.functions import Now

from ...context.handoffs import (
    handoff_after_interruption,
)
from ...database.clock import db_now_plus
from ...errors import (
    CONTEXT_TOO_LONG,
    DATABASE_LOST,
    MODEL_BUSY,
    MODEL_UNAVAILABLE,
    TOOL_SERVER_DOWN,
    AttemptStopped,
    BackendBusy,
    BackendUnavailable,
    CallsAwaitApproval,
    CallsInDoubt,
    ContextTooLong,
    PermanentError,
    ToolServerDown,
)
from ...live.events import publish_conversation_changed, publish_message_changed
from ...models import Conversation, CrashRecord, Handoff, Message, Run, ToolCall
from ..backends import backend_failed, backend_queue_release
from ..dead_letters import dead_letter_create
from ..drains import conversation_enqueue
from ..heartbeats import outage_note, outages_noted, stale_before
from ..inbox import message_bump
from ..pauses import conversation_pause
from .locking import conversation_lock

logger = logging.getLogger(__name__)


CRASH_ERROR = "Heartbeat stopped: the worker process died or hung."


# Failures that the same input will hit again on every retry: dead-letter at once.
PERMANENT_ERRORS = (PermanentError, ValidationError)
# The database went away (restart, failover, network) or timed out: not the message's fault.
DATABASE_ERRORS = (OperationalError, InterfaceError)


@dataclass(frozen=True)
class Cost:
    """What an attempt's failure costs: how `attempt_end` ends it."""

    state: str
    error: str
    counted: bool = True  # towards the message's cap of interruptions
    wait: float | None = None  # seconds the conversation waits for its model server
    permanent: bool = False  # dead-lettered at once
    traceback: str = ""


def failure_cost(error: Exception) -> Cost | None:
    """What the exception that ended an attempt costs the message; None for an attempt that
    was stopped (whoever stopped it ended it). A model server that failed is marked so here:
    its backoff is the conversation's wait."""
    match error:
        case AttemptStopped() | CallsInDoubt() | CallsAwaitApproval():
            return None
        case ContextTooLong():
            # Not the message's fault, nor the server's: the next attempt compacts to fit (a
            # refusal that teaches nothing new is a PermanentError instead: no loop).
            return Cost(Run.State.INTERRUPTED, f"{CONTEXT_TOO_LONG}: {error}", counted=False)
        case BackendBusy():
            # The server answers others: the conversation waits its turn in the server's queue
            # (a freed slot releases the queue's first) or `wait`.
            return Cost(
                Run.State.INTERRUPTED, f"{MODEL_BUSY}: {error}", counted=False, wait=error.wait
            )
        case BackendUnavailable():
            # The conversation waits the server's backoff. Within an outage (the server is
            # marked unavailable) the give-back is not even counted as an interruption.
            down = backend_failed(error.backend, reason=str(error), retry_after=error.retry_after)
            return Cost(
                Run.State.INTERRUPTED,
                f"{MODEL_UNAVAILABLE}: {error}",
                counted=not down.unavailable,
                wait=down.wait,
            )
        case ToolServerDown():
            # Infrastructure, like the database: the call was never sent, and the attempt is
            # given back to run it later.
            return Cost(Run.State.INTERRUPTED, f"{TOOL_SERVER_DOWN}: {error}")
        case OperationalError() | InterfaceError():
            # Given back like a planned interruption: no crash, no attempt used up.
            return Cost(Run.State.INTERRUPTED, f"{DATABASE_LOST}: {type(error).__name__}: {error}")
    return Cost(
        Run.State.FAILED,
        f"{type(error).__name__}: {error}",
        permanent=isinstance(error, PERMANENT_ERRORS),
        traceback="".join(traceback.format_exception(error)),
    )


def attempt_failed(*, run: Run, error: Exception, stopped: Event) -> None:
    """End the attempt that `error` stopped, at its `failure_cost`: then it is retried, given
    back or given up."""
    cost = failure_cost(error)
    if cost is None:
        logger.info("Attempt stopped: %s", error)
        return
    recorded = attempt_end_recorded(run, stopped, **asdict(cost))
    if isinstance(error, BackendBusy):
        # After the give-back committed: the queue's first may be this conversation.
        backend_queue_release(error.backend, limit=error.limit)
    elif not recorded and isinstance(error, DATABASE_ERRORS):
        outage_note(run.pk)  # the watchdog then ends it as interrupted


def attempt_end_recorded(run: Run, stopped: Event, **end: object) -> bool:
    """`attempt_end` of the run, recorded even if the database is away for a while."""
    return record_when_database_returns(partial(attempt_end, run_id=run.pk, **end), stopped=stopped)


def record_when_database_returns(record: Callable[[], object], *, stopped: Event) -> bool:
    """Record how an attempt ended, on a fresh connection, retrying while the database is away;
    False if it gave up.

    The heartbeat keeps the attempt's Redis key alive meanwhile, so the watchdog does not take
    the attempt for crashed. After CONTINUITY_DATABASE_RETRY_SECONDS it gives up: the attempt
    then ends unrecorded, and the watchdog reaps it once its heartbeat lapses.
    """
    deadline = time.monotonic() + settings.CONTINUITY_DATABASE_RETRY_SECONDS
    pause = 0.25  # then 0.5, then every second: a failover is over in about one
    while True:
        connection.close()  # the failed connection is unusable; never record through it
        try:
            record()
            return True
        except DATABASE_ERRORS:
            if stopped.is_set() or time.monotonic() + pause > deadline:
                logger.exception("Could not record the end of an attempt; the watchdog will")
                return False
            logger.warning("Database unavailable; retrying in %.2f s", pause)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


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
        if running_tools := crash_tools(run):
            error = f"{error} It was running the tool {running_tools}."
            Run.objects.filter(pk=run.pk).update(error=error)
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


def crash_tools(run: Run) -> str:
    """The tools the crashed attempt was running, named: a dead letter says which one kills
    its worker."""
    running = ToolCall.objects.filter(message_id=run.message_id, state=ToolCall.State.RUNNING)
    return ", ".join(running.values_list("tool", flat=True))


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
    if error.startswith(TOOL_SERVER_DOWN):
        # Asked again at once, it would find the server down again: it waits longer after each
        # time, and the interruptions' cap sets it aside only after hours, not seconds.
        Conversation.objects.filter(pk=conversation.pk).update(
            retry_at=db_now_plus(backoff_delay(interruptions - 1)),
            waiting_for=Conversation.WaitingFor.TOOL_SERVER,
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
