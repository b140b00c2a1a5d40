"""The tool calls of a reply's round: recorded before they run, run at most once unless a
person chooses Run again, and held for that person when a crash leaves one in doubt.

A round's calls are recorded (pending) in the transaction that checkpoints the round
(`calls_record`). Each is then marked running, committed, before it runs; its result is stored
when it returns (done or error). A built-in tool that writes our own database runs inside the
transaction that stores its result instead: a crash undoes both, so it runs again as if new.

A later attempt that finds a call running was cut off mid-call (`round_calls_settle`): a tool
that runs again safely (read-only or idempotent) runs again with the same idempotency key; any
other is in doubt, the attempt is given back uncharged, and the conversation waits for its
owner (`calls_hold`).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from functools import partial
from threading import Event

from django.db import DatabaseError, connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils import timezone

from .. import store
from ..brains import ToolUse
from ..errors import (
    CALLS_IN_DOUBT,
    AttemptStopped,
    CallsAwaitApproval,
    CallsInDoubt,
    ToolCallLost,
    ToolServerDown,
)
from ..live.events import publish_conversation_changed, publish_message_changed
from ..models import Conversation, Message, Run, ToolCall
from ..ops.faults import fault_point
from ..store import messages, runs
from ..tools import (
    BUILTIN,
    BUILTIN_TOOLS,
    Asker,
    Toolbox,
    arguments_problem,
    call_run,
    result_cut,
    server_down_note,
)
from .approvals import approval_due_at, approvals_expire, calls_await, tools_allowed_here
from .attempts.locking import conversation_lock, run_lock_owned
from .drains import conversation_enqueue
from .inbox import message_bump

logger = logging.getLogger(__name__)

# What the model reads of a call the person chose to skip.
SKIPPED_RESULT = (
    "This call was cut off by an interruption while it ran, so it may or may not have taken "
    "effect. The person chose Skip: it was not run again."
)
# What the model reads before the result of a call the person chose to run again.
RUN_AGAIN_SAID = "The person chose Run again after an interruption cut this call off. Result: "


@dataclass(frozen=True)
class Ended:
    state: str
    result: str
    cut: bool = False


@dataclass(frozen=True)
class Recording:
    """A round's calls as the transaction that checkpoints the round stores them: `inserts`,
    one per call (each reads back its row, None when fenced off), and every write (`writes`:
    the inserts and the reply's bump, which shows the blocks live)."""

    inserts: list[store.Query]
    writes: list[store.Query]


def calls_record(
    *, run: Run, number: int, uses: list[ToolUse], box: Toolbox, asker: Asker
) -> Recording:
    """Inside the transaction that checkpoints the round: its calls' rows, stored with it, so a
    crash before it commits leaves no call and the round is asked again. A call the model
    cannot make as asked is stored ended, its problem its result. A built-in tool runs here,
    in this process, and is stored with its result: whatever it reads or writes of our own
    database (after the run is locked, so no reaper ends the attempt meanwhile) commits with
    its row and the round, exactly once. A server's tool is stored pending: it runs once this
    commits; or, when its policy asks first and its owner has not allowed it for the whole
    conversation, awaiting the owner's approval."""
    inserts = []
    locked = False
    asking = {use.name for use in uses if (tool := box.tools.get(use.name)) and tool.asks_first}
    allowed_here = tools_allowed_here(run.conversation_id) if asking else set()
    due_at = approval_due_at() if asking else None
    for position, use in enumerate(uses):
        tool = box.tools.get(use.name)
        problem = arguments_problem(use, tool)
        builtin = BUILTIN_TOOLS.get(use.name) if tool and tool.source == BUILTIN else None
        values = {
            "round": number,
            "position": position,
            "call_id": use.call_id,
            "tool": use.name,
            "source": tool.source if tool else "",
            "arguments": use.arguments,
            "problem": problem,
            "key": uuid.uuid4(),
            "runs_again_safely": bool(tool and (tool.spec.runs_again_safely or builtin)),
        }
        if problem:
            values |= ended_values(Ended(ToolCall.State.ERROR, problem), runs=0)
        elif builtin is not None:
            if not (builtin.pure or locked):
                run_lock_owned(run)
                locked = True
            result = call_run(tool, use.arguments, key=str(values["key"]), asker=asker)
            values |= ended_values(ended_as(result), runs=1)
        elif use.name in asking and (tool.source, use.name) not in allowed_here:
            values |= {"state": ToolCall.State.AWAITING, "approval_due_at": due_at}
        inserts.append(runs.fenced_inserting(ToolCall, run=run, **values))
    transaction.on_commit(partial(message_changed_publish, run))
    return Recording(inserts, [*inserts, messages.message_bump(message_id=run.message_id)])


def ended_values(ended: Ended, *, runs: int) -> dict:
    now = timezone.now()
    started = {"started_at": now} if runs else {}
    return {
        "state": ended.state,
        "result": ended.result,
        "result_cut": ended.cut,
        "runs": runs,
        "ended_at": now,
        **started,
    }


def round_calls_settle(
    *,
    run: Run,
    number: int,
    box: Toolbox,
    asker: Asker,
    stopped: Event,
    recorded: list[ToolCall] | None = None,
) -> dict[str, str]:
    """Every call of the round ended, and what the model reads of each, by call id: those
    this attempt just `recorded`, or (a round an earlier attempt wrote) as stored. A call that
    ended before is read, never run again. CallsInDoubt, once they are held, when calls wait
    for their owner's decision; CallsAwaitApproval when they wait for the owner's approval."""
    calls = (
        recorded
        if recorded is not None
        else list(ToolCall.objects.filter(message_id=run.message_id, round=number))
    )
    if any(call.state == ToolCall.State.AWAITING for call in calls):
        calls = calls_awaiting_settle(run=run, number=number)
    undecided = [
        call
        for call in calls
        if call.state == ToolCall.State.IN_DOUBT
        or (call.state == ToolCall.State.RUNNING and not call.runs_again_safely)
    ]
    if undecided:
        calls_hold(run=run, calls=undecided)
        raise CallsInDoubt(
            f"Attempt {run.pk}: {len(undecided)} tool call(s) in doubt; the owner decides."
        )
    for call in calls:
        if call.state not in ToolCall.ENDED_STATES:
            call_execute(run=run, call=call, box=box, asker=asker, stopped=stopped)
    return {call.call_id: model_reads(call) for call in calls}


def calls_awaiting_settle(*, run: Run, number: int) -> list[ToolCall]:
    """The round's calls once none awaits: those past their deadline are denied here (the
    watchdog's sweep may not have come yet); CallsAwaitApproval, once the attempt is given
    back, while any still waits for its owner."""
    approvals_expire(message_id=run.message_id)
    calls = list(ToolCall.objects.filter(message_id=run.message_id, round=number))
    awaiting = [call for call in calls if call.state == ToolCall.State.AWAITING]
    if awaiting:
        calls_await(run=run, calls=awaiting)
        raise CallsAwaitApproval(
            f"Attempt {run.pk}: {len(awaiting)} tool call(s) wait for their owner's approval."
        )
    return calls


def model_reads(call: ToolCall) -> str:
    if call.decision == ToolCall.Decision.RUN_AGAIN and call.state != ToolCall.State.SKIPPED:
        return f"{RUN_AGAIN_SAID}{call.result}"
    return call.result


def call_execute(*, run: Run, call: ToolCall, box: Toolbox, asker: Asker, stopped: Event) -> None:
    """Run a server's call, recorded pending (or chosen to run again), once, and store how it
    ended (on `call` too). Its server's tools not offered now: ToolServerDown, given back."""
    if stopped.is_set():
        raise AttemptStopped(f"Attempt {run.pk} stopped before tool call {call.pk}.")
    tool = box.tools.get(call.tool)
    if call.source in box.down:
        raise ToolServerDown(
            f"The MCP server {call.source} is not available: call {call.pk} ({call.tool}) "
            "waits for it."
        )
    if tool is None or tool.source != call.source:
        # Its server answers, and no longer offers it (staff disabled it, or its list changed).
        said = f"The tool {call.tool!r} is no longer available: the call was not made."
        call_end(run=run, call=call, ended=Ended(ToolCall.State.ERROR, said))
        return
    call_start(run=run, call=call)
    fault_point("tool_call_started")
    try:
        result = call_run(
            tool,
            call.arguments,
            key=str(call.key),
            asker=asker,
            progress=progress_recorder(run=run, call=call),
        )
    except ToolServerDown as down:
        # Never sent: nothing happened, and the next attempt sends it as if for the first time.
        ToolCall.objects.filter(pk=call.pk, state=ToolCall.State.RUNNING).update(
            state=ToolCall.State.PENDING, runs=F("runs") - 1
        )
        server_down_note(tool.source, tool.location, str(down))
        raise
    except ToolCallLost as lost:
        if lost.timed_out:
            ToolCall.objects.filter(pk=call.pk).update(timed_out=True)
        if lost.timed_out and call.runs_again_safely:
            # Past its time limit: ended, not sent again, and the model reads why.
            said = (
                f"The tool did not answer within its time limit of {tool.time_limit:g} s, so "
                "the call was ended without a result."
            )
            call_end(run=run, call=call, ended=Ended(ToolCall.State.ERROR, said))
            return
        if call.runs_again_safely:  # its connection broke: the same key, once it is back
            raise ToolServerDown(f"{lost} The call runs again with the same key.") from lost
        calls_hold(run=run, calls=[call])
        raise CallsInDoubt(f"Attempt {run.pk}: tool call {call.pk} lost its answer.") from lost
    fault_point("tool_call_returned")
    call_end(run=run, call=call, ended=ended_as(result))


# A server may say its progress many times a second: the page hears it at most this often
# (and always its last word, the whole done).
PROGRESS_EVERY_SECONDS = 0.5


def progress_recorder(*, run: Run, call: ToolCall):
    """What stores a running call's progress as its server says it, so the page shows it
    live. Called on a thread of its own, whose connection is closed after each write. A
    progress lost to a database error is only a courtesy lost: the call goes on."""
    last = [0.0]

    def record(done: float, total: float | None, said: str) -> None:
        now = time.monotonic()
        if now - last[0] < PROGRESS_EVERY_SECONDS and (total is None or done < total):
            return
        last[0] = now
        try:
            with transaction.atomic():
                # Notifications may be heard out of order: a later word never goes back.
                updated = (
                    ToolCall.objects.filter(
                        pk=call.pk, state=ToolCall.State.RUNNING, runs=call.runs
                    )
                    .filter(Q(progress__isnull=True) | Q(progress__lte=done))
                    .update(progress=done, progress_total=total, progress_message=said[:200])
                )
                if updated:
                    message_changed(run)
        except DatabaseError:
            logger.warning("Progress of tool call %s not stored", call.pk, exc_info=True)
        finally:
            connection.close()

    return record


def ended_as(result) -> Ended:
    text, cut = result_cut(result.text.replace("\x00", ""))  # PostgreSQL stores no NUL
    return Ended(ToolCall.State.ERROR if result.is_error else ToolCall.State.DONE, text, cut)


def call_start(*, run: Run, call: ToolCall) -> None:
    """Committed before the call runs: a crash from here on leaves it running, which the next
    attempt reads as cut off mid-call."""
    with transaction.atomic():
        run_lock_owned(run)
        ToolCall.objects.filter(pk=call.pk).update(
            state=ToolCall.State.RUNNING, runs=F("runs") + 1, started_at=Now(), ended_at=None
        )
        message_changed(run)
    call.state, call.runs = ToolCall.State.RUNNING, call.runs + 1


def call_end(*, run: Run, call: ToolCall, ended: Ended) -> None:
    """Store how the call ended. An attempt stopped or reaped while its call ran still
    records what the call returned (it happened; the next attempt must not doubt it), as long
    as no later run of the call began meanwhile."""
    changes = {"state": ended.state, "result": ended.result, "result_cut": ended.cut}
    try:
        with transaction.atomic():
            run_lock_owned(run)
            ToolCall.objects.filter(pk=call.pk).update(ended_at=Now(), **changes)
            message_changed(run)
    except AttemptStopped:
        ToolCall.objects.filter(pk=call.pk, state=ToolCall.State.RUNNING, runs=call.runs).update(
            ended_at=Now(), **changes
        )
        raise
    call.state, call.result, call.result_cut = ended.state, ended.result, ended.cut


def message_changed(run: Run) -> None:
    """Inside the transaction of a call's change: its reply's page shows the change live."""
    message_bump(message_id=run.message_id)
    transaction.on_commit(partial(message_changed_publish, run))


def message_changed_publish(run: Run) -> None:
    publish_message_changed(conversation_id=run.conversation_id, message_id=run.message_id)


def calls_hold(*, run: Run, calls: list[ToolCall]) -> None:
    """The calls are in doubt: the attempt ends, given back uncharged (its checkpoints, the
    round's included, are kept), and the conversation waits for its owner's decision; its new
    messages queue meanwhile. AttemptStopped when the attempt no longer owns its message."""
    with transaction.atomic():
        conversation_lock(run.conversation_id)
        said = f"{CALLS_IN_DOUBT}: {', '.join(call.tool for call in calls)}"
        if not store.execute(runs.run_end(run=run, state=Run.State.INTERRUPTED, error=said)):
            raise AttemptStopped(f"Attempt {run.pk} no longer owns message {run.message_id}.")
        ToolCall.objects.filter(
            pk__in=[call.pk for call in calls],
            state__in=[ToolCall.State.RUNNING, ToolCall.State.IN_DOUBT],
        ).update(state=ToolCall.State.IN_DOUBT, ended_at=Now())
        # Given back as an interruption: its attempt uncounted, and the page shows the
        # exchange's calls and what was written, as for any interrupted attempt.
        message = Message.objects.filter(pk=run.message_id).values("interruptions").get()
        message_bump(
            message_id=run.message_id,
            state=Message.State.QUEUED,
            attempts=run.attempt - 1,
            interruptions=message["interruptions"] + 1,
        )
        in_doubt = ToolCall.objects.filter(message_id=run.message_id, state=ToolCall.State.IN_DOUBT)
        if in_doubt.exists():
            Conversation.objects.filter(
                pk=run.conversation_id, state=Conversation.State.ACTIVE
            ).update(state=Conversation.State.DECIDING)
        else:  # its owner decided while this attempt looked: the next one goes on
            transaction.on_commit(
                partial(conversation_enqueue, conversation_id=run.conversation_id)
            )
        transaction.on_commit(lambda: conversation_changed(run))
    logger.info(
        "Attempt %s given back: tool call(s) %s in doubt", run.pk, [call.pk for call in calls]
    )


def conversation_changed(run: Run) -> None:
    message_changed_publish(run)
    publish_conversation_changed(conversation_id=run.conversation_id)
