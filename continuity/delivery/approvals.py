"""Tool calls that wait for their owner's approval. Waiting is a row, never a process: the call
is recorded awaiting, with its deadline, and the attempt that met it ends, given back uncharged
(`calls_await`). The conversation waits, its backoff running to the earliest deadline, until
the owner answers; then (or at the deadline, or when a new message or Stop denies the calls)
the next attempt is enqueued, and the model reads what became of each call.

Every answer is fenced on the call still awaiting: a second answer, a stale tab or a double
click changes nothing, and its caller says so."""

from __future__ import annotations

import logging
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import Min
from django.db.models.functions import Now

from .. import store
from ..database.clock import database_now
from ..errors import AWAITING_APPROVAL, AttemptStopped
from ..live.events import publish_conversation_changed, publish_message_changed
from ..models import Conversation, Message, Run, ToolAllowance, ToolCall
from ..store import messages, runs
from .attempts.locking import conversation_lock
from .drains import conversation_enqueue

logger = logging.getLogger(__name__)

Answer = ToolCall.Answer


def denial_said(answer: str) -> str:
    """What the model reads of a call that was not approved."""
    minutes = settings.CONTINUITY_APPROVAL_SECONDS / 60
    return {
        Answer.DENY: "The person denied this call: it was not run.",
        Answer.MOVED_ON: "Not run: the person moved on (they sent a new message instead of "
        "answering), so the call was denied.",
        Answer.STOPPED: "Not run: the person pressed Stop. Do not ask for it again in this reply.",
        Answer.TIMED_OUT: f"Not approved in time: the person did not answer within {minutes:g} "
        "minutes, so it was not run.",
        Answer.SUPPORT_ANSWERED: "Not run: support answered the person instead.",
    }[answer]


def approval_due_at():
    """The deadline of an approval asked now, on the database's clock."""
    return database_now() + timedelta(seconds=settings.CONTINUITY_APPROVAL_SECONDS)


def tools_allowed_here(conversation_id: int) -> set[tuple[str, str]]:
    """The (server, tool) pairs the owner allowed for the whole conversation."""
    return set(
        ToolAllowance.objects.filter(conversation_id=conversation_id).values_list("source", "tool")
    )


def calls_await(*, run: Run, calls: list[ToolCall]) -> None:
    """The calls wait for their owner: the attempt ends, given back uncharged (its checkpoints
    kept), and the conversation waits until the earliest deadline; the watchdog's sweep sends
    the next attempt then, if no answer did before. AttemptStopped when the attempt no longer
    owns its message."""
    with transaction.atomic():
        conversation_lock(run.conversation_id)
        said = f"{AWAITING_APPROVAL}: {', '.join(call.tool for call in calls)}"
        if not store.execute(runs.run_end(run=run, state=Run.State.INTERRUPTED, error=said)):
            raise AttemptStopped(f"Attempt {run.pk} no longer owns message {run.message_id}.")
        store.execute(
            messages.message_bump(
                message_id=run.message_id, state=Message.State.QUEUED, attempts=run.attempt - 1
            )
        )
        if (
            Message.objects.waiting()
            .filter(conversation_id=run.conversation_id, pk__gt=run.message_id)
            .exists()
        ):
            # The person wrote again before the question reached them (the round had just
            # committed its calls): they moved on, as if they had written a moment later.
            approvals_deny(
                conversation_id=run.conversation_id,
                answer=Answer.MOVED_ON,
                message_id=run.message_id,
            )
        due = ToolCall.objects.filter(
            message_id=run.message_id, state=ToolCall.State.AWAITING
        ).aggregate(due=Min("approval_due_at"))["due"]
        if due is None:  # answered while this attempt looked: the next one goes on
            transaction.on_commit(
                partial(conversation_enqueue, conversation_id=run.conversation_id)
            )
        else:
            Conversation.objects.filter(
                pk=run.conversation_id, state=Conversation.State.ACTIVE
            ).update(retry_at=due, waiting_for=Conversation.WaitingFor.APPROVAL)
        transaction.on_commit(partial(changed_publish, run.conversation_id, run.message_id))
    logger.info(
        "Attempt %s given back: tool call(s) %s wait for approval", run.pk, [c.pk for c in calls]
    )


def calls_answer(*, awaiting, answer: str, by=None) -> list[ToolCall]:
    """Inside the caller's transaction, with the conversation locked: answer the calls of
    `awaiting` (a ToolCall queryset) that still await. Allowed, a call is pending, to run at
    the next attempt; denied, it ends with what the model reads. The calls answered."""
    answered = list(awaiting.filter(state=ToolCall.State.AWAITING).select_for_update())
    if not answered:
        return []
    changes = {"answer": answer, "answered_by": by, "answered_at": Now()}
    if answer in (Answer.ALLOW, Answer.ALLOW_HERE):
        changes |= {"state": ToolCall.State.PENDING}
    else:
        state = ToolCall.State.EXPIRED if answer == Answer.TIMED_OUT else ToolCall.State.DENIED
        changes |= {"state": state, "result": denial_said(answer), "ended_at": Now()}
    ToolCall.objects.filter(
        pk__in=[call.pk for call in answered], state=ToolCall.State.AWAITING
    ).update(**changes)
    for message_id in {call.message_id for call in answered}:
        store.execute(messages.message_bump(message_id=message_id))
    return answered


def conversation_goes_on(conversation_id: int) -> bool:
    """Inside the transaction of an answer: once none of its waiting messages' calls awaits, a
    conversation that waited for one goes on at once (one paused or taken over meanwhile only
    forgets the wait: resumed or handed back, it goes on then). Whether nothing awaits."""
    if ToolCall.objects.filter(
        message__conversation_id=conversation_id,
        message__state__in=Message.WAITING_STATES,
        state=ToolCall.State.AWAITING,
    ).exists():
        return False
    waited = Conversation.objects.filter(
        pk=conversation_id, waiting_for=Conversation.WaitingFor.APPROVAL
    )
    if waited.filter(state=Conversation.State.ACTIVE).update(retry_at=None, waiting_for=""):
        transaction.on_commit(partial(conversation_enqueue, conversation_id=conversation_id))
    waited.update(waiting_for="")
    return True


def approvals_deny(*, conversation_id: int, answer: str, message_id: int | None = None) -> int:
    """Inside the caller's transaction, with the conversation locked: a new message (MOVED_ON)
    or Stop (STOPPED, `message_id`'s calls) denies what waits, and the conversation goes on.
    How many calls were denied."""
    awaiting = ToolCall.objects.filter(message__conversation_id=conversation_id)
    if message_id is not None:
        awaiting = awaiting.filter(message_id=message_id)
    answered = calls_answer(awaiting=awaiting, answer=answer)
    if answered:
        conversation_goes_on(conversation_id)
        transaction.on_commit(partial(answered_publish, conversation_id, answered))
    return len(answered)


def approvals_expire(*, message_id: int | None = None) -> int:
    """The watchdog's sweep (or an attempt's, for its `message_id`): calls still awaiting at
    their deadline are denied (the model reads "not approved in time"), once, whether or not a
    worker runs, and their conversations go on. How many."""
    expired = 0
    due = ToolCall.objects.filter(state=ToolCall.State.AWAITING, approval_due_at__lte=Now())
    if message_id is not None:
        due = due.filter(message_id=message_id)

    def expire(conversation_id: int) -> int:
        with transaction.atomic():
            conversation_lock(conversation_id)
            answered = calls_answer(
                awaiting=due.filter(message__conversation_id=conversation_id),
                answer=Answer.TIMED_OUT,
            )
            if answered:
                conversation_goes_on(conversation_id)
                transaction.on_commit(partial(answered_publish, conversation_id, answered))
        return len(answered)

    for conversation_id in set(due.values_list("message__conversation_id", flat=True)):
        try:  # one conversation that cannot be written must not hold up the others
            expired += expire(conversation_id)
        except DatabaseError:
            logger.exception("Approvals of conversation %s not expired", conversation_id)
    if expired:
        logger.info("%s tool call(s) not approved in time were denied", expired)
    return expired


def answered_publish(conversation_id: int, calls: list[ToolCall]) -> None:
    for message_id in {call.message_id for call in calls}:
        changed_publish(conversation_id, message_id)


def changed_publish(conversation_id: int, message_id: int) -> None:
    publish_message_changed(conversation_id=conversation_id, message_id=message_id)
    publish_conversation_changed(conversation_id=conversation_id)
