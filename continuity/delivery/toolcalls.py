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
from dataclasses import dataclass
from threading import Event

from django.db import transaction
from django.db.models import F
from django.db.models.functions import Now

from .. import store
from ..brains import ToolUse
from ..errors import CALLS_IN_DOUBT, AttemptStopped, CallsInDoubt, ToolCallLost, ToolServerDown
from ..live.events import publish_conversation_changed, publish_message_changed
from ..models import Conversation, Message, Run, ToolCall
from ..ops.faults import fault_point
from ..store import messages, runs
from ..tools import BUILTIN, BUILTIN_TOOLS, Asker, Toolbox, arguments_problem, call_run, result_cut
from .attempts.locking import conversation_lock, run_lock_owned

logger = logging.getLogger(__name__)

# What the model reads of a call the person chose to skip.
SKIPPED_RESULT = (
    "This call was cut off by an interruption while it ran, so it may or may not have taken "
    "effect. The person chose Skip: it was not run again."
)
# What the model reads before the result of a call the person chose to run again.
RUN_AGAIN_SAID = "The person chose Run again after an interruption cut this call off. Result: "


def calls_record(*, run: Run, number: int, uses: list[ToolUse], box: Toolbox) -> list:
    """The fenced inserts of the round's calls (pending), for the transaction that checkpoints
    the round: a crash before it commits leaves no call, and the round is asked again."""
    inserts = []
    for position, use in enumerate(uses):
        tool = box.tools.get(use.name)
        safe = bool(
            tool
            and (
                tool.spec.runs_again_safely
                or (tool.source == BUILTIN and BUILTIN_TOOLS[use.name].transactional)
            )
        )
        inserts.append(
            runs.fenced_insert(
                ToolCall,
                run=run,
                round=number,
                position=position,
                call_id=use.call_id,
                tool=use.name,
                source=tool.source if tool else "",
                arguments=use.arguments,
                problem=arguments_problem(use, tool),
                runs_again_safely=safe,
            )
        )
    return inserts


def round_calls_settle(
    *, run: Run, number: int, box: Toolbox, asker: Asker, stopped: Event
) -> dict[str, str]:
    """Every call of the round ended, and what the model reads of each, by call id. A call
    that ended before is read, never run again. CallsInDoubt, once they are held, when calls
    wait for their owner's decision."""
    calls = list(ToolCall.objects.filter(message_id=run.message_id, round=number))
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


def model_reads(call: ToolCall) -> str:
    if call.decision == ToolCall.Decision.RUN_AGAIN and call.state != ToolCall.State.SKIPPED:
        return f"{RUN_AGAIN_SAID}{call.result}"
    return call.result


@dataclass(frozen=True)
class Ended:
    state: str
    result: str
    cut: bool = False


def call_execute(*, run: Run, call: ToolCall, box: Toolbox, asker: Asker, stopped: Event) -> None:
    """Run the call once and store how it ended (on `call` too)."""
    if stopped.is_set():
        raise AttemptStopped(f"Attempt {run.pk} stopped before tool call {call.pk}.")
    if call.problem:
        call_end(run=run, call=call, ended=Ended(ToolCall.State.ERROR, call.problem))
        return
    tool = box.tools.get(call.tool)
    if tool is None:
        if call.source and call.source != BUILTIN:
            raise ToolServerDown(
                f"The MCP server {call.source} is not available: call {call.pk} ({call.tool}) "
                "waits for it."
            )
        call_end(
            run=run,
            call=call,
            ended=Ended(ToolCall.State.ERROR, f"There is no tool named {call.tool!r} now."),
        )
        return
    if tool.source == BUILTIN and BUILTIN_TOOLS[tool.spec.name].transactional:
        with transaction.atomic():
            run_lock_owned(run)
            result = call_run(tool, call.arguments, key=str(call.key), asker=asker)
            call_end(run=run, call=call, ended=ended_as(result), started=True)
        return
    call_start(run=run, call=call)
    fault_point("tool_call_started")
    try:
        result = call_run(tool, call.arguments, key=str(call.key), asker=asker)
    except ToolServerDown:
        # Never sent: nothing happened, and the next attempt sends it as if for the first time.
        ToolCall.objects.filter(pk=call.pk, state=ToolCall.State.RUNNING).update(
            state=ToolCall.State.PENDING, runs=F("runs") - 1
        )
        raise
    except ToolCallLost as lost:
        if call.runs_again_safely:
            raise ToolServerDown(f"{lost} The call runs again with the same key.") from lost
        calls_hold(run=run, calls=[call])
        raise CallsInDoubt(f"Attempt {run.pk}: tool call {call.pk} lost its answer.") from lost
    fault_point("tool_call_returned")
    call_end(run=run, call=call, ended=ended_as(result))


def ended_as(result) -> Ended:
    text, cut = result_cut(result.text)
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
    call.state = ToolCall.State.RUNNING


def call_end(*, run: Run, call: ToolCall, ended: Ended, started: bool = False) -> None:
    """Store how the call ended (inside the caller's transaction, when it has one)."""
    with transaction.atomic():
        run_lock_owned(run)
        changes = {"state": ended.state, "result": ended.result, "result_cut": ended.cut}
        if started:
            changes.update(runs=F("runs") + 1, started_at=Now())
        ToolCall.objects.filter(pk=call.pk).update(ended_at=Now(), **changes)
        message_changed(run)
    call.state, call.result, call.result_cut = ended.state, ended.result, ended.cut


def message_changed(run: Run) -> None:
    """Inside the transaction of a call's change: its reply's page shows the change live."""
    store.execute(messages.message_bump(message_id=run.message_id))
    transaction.on_commit(
        lambda: publish_message_changed(
            conversation_id=run.conversation_id, message_id=run.message_id
        )
    )


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
        store.execute(
            messages.message_bump(
                message_id=run.message_id, state=Message.State.QUEUED, attempts=run.attempt - 1
            )
        )
        Conversation.objects.filter(pk=run.conversation_id, state=Conversation.State.ACTIVE).update(
            state=Conversation.State.DECIDING
        )
        transaction.on_commit(lambda: conversation_changed(run))
    logger.info(
        "Attempt %s given back: tool call(s) %s in doubt", run.pk, [call.pk for call in calls]
    )


def conversation_changed(run: Run) -> None:
    publish_message_changed(conversation_id=run.conversation_id, message_id=run.message_id)
    publish_conversation_changed(conversation_id=run.conversation_id)
