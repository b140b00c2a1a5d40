"""Processing one message as named steps, each checkpointed before the next one starts.

A re-executed attempt (after a crash or an interruption) reuses the stored outputs of completed
steps. Each attempt first assembles its context (stored by reference as its `RunContext`).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from threading import Event

from django.conf import settings
from django.db import transaction

from .. import store
from ..brains import CUT_OFF, Brain, Context, ToolRound, ToolUse, Work, brain_class, brain_load
from ..context.assembly import (
    ContextReads,
    ContextRefs,
    context_assembled,
    context_of,
    context_reads,
    context_tokens,
    run_context_store,
)
from ..context.compaction import (
    compaction_candidates,
    compaction_store,
    exchanges_forgotten,
    summary_bounded,
    summary_room,
    turns_of,
)
from ..context.handoffs import handoff_changes
from ..context.recoveries import recovery_note, recovery_record
from ..context.tokens import context_budget
from ..errors import (
    AttemptStopped,
    BackendBusy,
    EmptyReply,
    NextAttemptFailed,
    WorkerStopping,
)
from ..live.events import publish_conversation_changed, publish_reply_chunk
from ..models import Conversation, Message, Run, ToolCall
from ..ops.faults import fault_point
from ..store import runs
from ..tools import Asker, Toolbox, toolbox
from .attempts.failures import attempt_failed, conversation_wait_for_model
from .attempts.finish import reply_committing, reply_finish
from .attempts.lease import Lease, attempt_open, attempt_withdraw, lease_taken
from .attempts.locking import conversation_lock, fence_held, run_lock_owned
from .backends import backend_answered, backend_down, backend_slot
from .drains import conversation_enqueue
from .heartbeats import RunHeartbeat
from .inbox import title_from_text
from .toolcalls import calls_record, round_calls_settle
from .workers import attempt_key_write

logger = logging.getLogger(__name__)


def drain_conversation(*, conversation_id: int, node: str = "") -> None:
    """Answer the conversation's waiting messages, oldest first, for its slice
    (CONTINUITY_DRAIN_SLICE_SECONDS); a follow-up task takes the rest from the back of the queue.
    Within the slice, the attempt on the next message begins in the transaction that stores the
    previous reply. The task is acknowledged only once it returns: a worker that dies during
    the slice gives it back to the queue."""
    slice_ends = time.monotonic() + settings.CONTINUITY_DRAIN_SLICE_SECONDS
    try:
        begun = attempt_first(conversation_id=conversation_id, node=node)
        while begun is not None:
            outcome = attempt_execute(begun=begun, node=node, slice_ends=slice_ends)
            begun = outcome.next_begun
            if outcome.more_waiting:
                # More wait, and no drain was sent for them: answer the next one here, unless
                # the slice ran out since the reply was stored (the title took it).
                if time.monotonic() >= slice_ends:
                    conversation_enqueue(conversation_id=conversation_id)
                    return
                begun = attempt_first(conversation_id=conversation_id, node=node)
    except WorkerStopping:
        # This worker hands over the attempts it has; another one answers the rest.
        conversation_enqueue(conversation_id=conversation_id)


@dataclass
class Begun:
    """An attempt that began, and what it needs, prepared in the transaction that began it.
    Nothing in that transaction waits on Redis or loads a brain: it holds the conversation's
    lock, and every writer of the conversation (a send, the watchdog) waits for as long as it
    runs; a process frozen there held it until the server ended its session."""

    run: Run
    brain_name: str
    stored: dict[str, dict]  # the checkpoints of earlier attempts on the message, by step
    context: Context | None  # None when it needs compacting first


@dataclass(frozen=True)
class Outcome:
    """How an attempt left the conversation's queue."""

    # More wait, no drain was sent for them and none began: the caller answers the next.
    more_waiting: bool = False
    # The attempt on the next message, begun in the transaction that stored the reply.
    next_begun: Begun | None = None


def attempt_first(*, conversation_id: int, node: str) -> Begun | None:
    """Begin an attempt on the conversation's oldest waiting message, if one may begin now."""
    with lease_taken(conversation_id) as lease:
        return attempt_prepared(lease, node=node)


def attempt_prepared(lease: Lease, *, node: str) -> Begun | None:
    """Inside the transaction that read the `lease` (`lease_taken`, or the one that stores
    the previous reply): begin the attempt on its message, if any, and prepare what it needs.
    In the round trip that begins it, it reads the checkpoints earlier attempts stored for the
    message (those steps are not run again), then its context: on every attempt, as no count
    on the message says for sure whether one ran before (a model server's outage gives its
    attempts back uncounted)."""
    message = lease.message
    if message is None:
        return None
    checkpoints = runs.checkpoints_stored(message_id=message.pk)
    message.conversation = lease.conversation  # the context's reads need its owner
    reads = context_reads(message=message)
    run, found = attempt_open(
        conversation=lease.conversation, message=message, node=node, reads=[checkpoints, *reads]
    )
    fault_point("attempt_locked")
    budget = context_budget(brain_class(lease.conversation.brain))
    return Begun(
        run=run,
        brain_name=lease.conversation.brain,
        stored=found[checkpoints],
        context=context_prepare(run=run, message=message, reads=reads, found=found, budget=budget),
    )


def attempt_ready(begun: Begun, *, stopping: bool) -> Brain | None:
    """Once the attempt's beginning committed, with its heartbeat running: its brain, or None
    when it may not go on now and was withdrawn (its brain's model server is marked unavailable:
    the conversation waits for the server's next try). WorkerStopping, withdrawn, once a
    planned shutdown of this worker began (`stopping`): another worker begins it."""
    run = begun.run
    if stopping:
        attempt_withdraw(run)
        raise WorkerStopping(f"Worker {run.node} is shutting down; attempt {run.pk} withdrawn.")
    try:
        brain = brain_load(begun.brain_name)
    except Exception:
        # This worker's fault (a brain it cannot load), not the message's.
        attempt_withdraw(run)
        raise
    backend = getattr(brain, "backend", None)
    if backend and (down := backend_down(backend)):
        attempt_withdraw(run)
        conversation_wait_for_model(conversation_id=run.conversation_id, seconds=down.wait)
        logger.info("Attempt %s withdrawn: %s Next try in %.0f s.", run.pk, down.reason, down.wait)
        return None
    return brain


def attempt_resumes(*, run: Run, message: Message) -> bool:
    """Whether an earlier attempt on the message stopped (crashed, failed or was interrupted;
    an interruption gives its attempt back, so the count alone does not say)."""
    return run.attempt > 1 or message.interruptions > 0


def attempt_execute(*, begun: Begun, node: str = "", slice_ends: float = 0.0) -> Outcome:
    """Run the attempt's steps and store its reply. `slice_ends` (on the monotonic clock): when
    the drain's slice ends. Until then, the attempt on the next message begins with the reply
    (unless the reply may title the conversation: a model call, made after the commit), or
    more waiting messages are left to the caller."""
    run = begun.run
    # The row's heartbeat first: the key's write may wait out Redis's retries (a failover), and
    # a row left stale that long, with no key, is reaped as a crash.
    with RunHeartbeat(run.pk, key_written=True) as heartbeat:
        stopping = attempt_key_write(run_id=run.pk, node=node)
        brain = attempt_ready(begun, stopping=stopping)
        if brain is None:
            return Outcome()
        try:
            answer = steps_run(
                run=run,
                brain=brain,
                stopped=heartbeat.stopped,
                stored=begun.stored,
                context=begun.context,
            )
            outcome = reply_commit(
                run=run, answer=answer, node=node, follow_up=time.monotonic() >= slice_ends
            )
            heartbeat.completed = True
        except Exception as error:  # any failure of a step is recorded, then retried or given up
            attempt_failed(run=run, error=error, stopped=heartbeat.stopped)
            return Outcome()
    try:  # after the heartbeat stopped: the attempt is over
        conversation_title(context=answer.context, brain=brain, reply=answer.text)
    except Exception:  # the answer is committed; a title is not worth failing for
        logger.warning("Conversation %s not titled", run.conversation_id, exc_info=True)
    return outcome


def reply_commit(*, run: Run, answer: Answer, node: str, follow_up: bool) -> Outcome:
    """Store the reply; with `follow_up` False, begin the attempt on the next message in its
    transaction, unless the reply may title the conversation (`title_due`). When that attempt
    cannot begin, the reply is stored alone: the next message's trouble must not cost it."""
    lease_next = not (follow_up or title_due(answer.context))
    try:
        return reply_stored(
            run=run, answer=answer, node=node, follow_up=follow_up, lease_next=lease_next
        )
    except NextAttemptFailed:
        logger.warning("Reply of attempt %s stored alone", run.pk, exc_info=True)
        return reply_stored(
            run=run, answer=answer, node=node, follow_up=follow_up, lease_next=False
        )


def reply_stored(
    *, run: Run, answer: Answer, node: str, follow_up: bool, lease_next: bool
) -> Outcome:
    """The reply's transaction (`reply_finish`), and the attempt on the next message begun in
    it, when it may: NextAttemptFailed, with nothing stored, when that attempt failed."""
    with reply_committing():
        finished = reply_finish(
            run=run,
            reply_text=answer.text,
            cut_off=answer.cut_off,
            handoff_changes=answer.handoff_changes,
            remembered=answer.remembered,
            follow_up=follow_up,
            lease_next=lease_next,
        )
        if finished.next is None:
            return Outcome(more_waiting=finished.more_waiting)
        try:
            return Outcome(next_begun=attempt_prepared(finished.next, node=node))
        except Exception as exc:
            raise NextAttemptFailed(f"Attempt {run.pk}: the next attempt did not begin.") from exc


def title_due(context: Context) -> bool:
    """Whether the reply to this context may title its conversation: its first exchange."""
    return not (context.history or context.summary)


# How long a title waits for a busy model server before it is skipped (answers come first).
TITLE_SLOT_WAIT_SECONDS = 5.0


@contextmanager
def model_slot(
    brain: Brain,
    *,
    wait: float = 0.0,
    stopped: Event | None = None,
    conversation_id: int | None = None,
) -> Iterator[None]:
    """One of the requests the brain's model server may serve at once
    (`brain.concurrency()`; none for a brain without a server), in turn. An attempt
    (`conversation_id`) asks once: BackendBusy when none is its to take, and the attempt is
    given back, uncounted, holding no process while it waits its turn (or, should its turn's
    drain be lost, CONTINUITY_OPENAI_REQUEST_TIMEOUT). A title waits up to `wait` seconds."""
    backend = getattr(brain, "backend", None)
    limit = brain.concurrency() if backend and hasattr(brain, "concurrency") else 0
    with backend_slot(
        backend or "", limit=limit, wait=wait, stopped=stopped, conversation_id=conversation_id
    ) as held:
        if not held:
            raise BackendBusy(
                f"{backend}: all {limit} of its request slots are taken, or other "
                "conversations' turn.",
                backend=backend,
                wait=settings.CONTINUITY_OPENAI_REQUEST_TIMEOUT,
                limit=limit,
            )
        yield


def conversation_title(*, context: Context, brain: Brain, reply: str) -> None:
    """After the first reply of a conversation, the brain titles it, unless its owner already
    did. Best effort, after the reply is committed: a title never costs an answer, and a
    worker that dies here leaves the first message's words as the title."""
    if not title_due(context):
        return
    conversation = Conversation.objects.filter(pk=context.conversation_id, titled_by_owner=False)
    earlier = Message.objects.filter(
        conversation_id=context.conversation_id, role=Message.Role.USER, pk__lt=context.message_id
    )
    if earlier.exists() or not conversation.exists():
        return
    try:
        with model_slot(brain, wait=TITLE_SLOT_WAIT_SECONDS):
            title = title_from_text(brain.title(context, reply))
    except BackendBusy:  # its server is busy with answers: the first words stay
        return
    if title and conversation.update(title=title):
        publish_conversation_changed(
            conversation_id=context.conversation_id, owner_id=context.owner_id
        )


@dataclass(frozen=True)
class Answer:
    """What an attempt's steps produced, to be stored in the transaction that ends it."""

    context: Context  # as the attempt assembled it
    text: str
    cut_off: bool  # the model stopped at its length limit
    # What the exchange changed in the handoff it began with (`handoff_changes`), None if nothing.
    handoff_changes: dict | None
    remembered: dict[str, str] | None  # the last step's facts; None when an earlier attempt
    # stored them


def steps_run(
    *,
    run: Run,
    brain: Brain,
    stopped: Event,
    stored: dict[str, dict],
    context: Context | None = None,
) -> Answer:
    """Run the attempt's steps, each checkpointed (or taken from an earlier attempt's
    checkpoint), up to the facts of the last one (remember), which commit with the reply."""
    if context is None:
        message = Message.objects.select_related("conversation").get(pk=run.message_id)
        if stopped.is_set():
            raise AttemptStopped(f"Attempt {run.pk} stopped before assembling its context.")
        context = context_assemble(run=run, message=message, brain=brain)
    plan = step(run, "plan", stopped, stored, lambda: brain.plan(context))
    replied = stored.get("respond") or reply_rounds(
        run=run, brain=brain, context=context, plan=plan, stopped=stopped, stored=stored
    )
    reply = replied["reply"]
    if backend := getattr(brain, "backend", None):
        backend_answered(backend)
    remembered = None
    if "remember" not in stored:
        if stopped.is_set():
            raise AttemptStopped(f"Attempt {run.pk} stopped before step remember.")
        remembered = brain.remember(context, plan, reply)
    return Answer(
        context=context,
        text=reply,
        cut_off=bool(replied.get("cut_off")),
        handoff_changes=handoff_changes(context.handoff, brain.task_state(context, plan, reply)),
        remembered=remembered,
    )


ROUND_STEP = "round-{}"
# What the model reads on the round past CONTINUITY_TOOL_ROUNDS, offered no tools.
NO_MORE_ROUNDS = "No more tool calls in this reply: answer now with what you have."


def reply_rounds(
    *, run: Run, brain: Brain, context: Context, plan: dict, stopped: Event, stored: dict
) -> dict:
    """The respond step's output, written in rounds: the model writes, and may ask for tool
    calls; their results go back to it, and it writes again, up to CONTINUITY_TOOL_ROUNDS. A
    round with calls is checkpointed with its calls' rows (`round-N`); the round without, with
    the reply, which is every round's text (`respond`). A resumed attempt reuses every round
    and every call that ended before it."""
    box = toolbox()
    asker = Asker(context.owner_id, context.conversation_id, context.message_id)
    streamed = ReplyStream(run=run, stopped=stopped)
    rounds: list[ToolRound] = []
    for number in itertools.count(1):
        recorded = None  # a round an earlier attempt wrote: its calls are read as stored
        if (output := stored.get(ROUND_STEP.format(number))) is not None:
            streamed.resume_with(output["text"])
        else:
            last = number > settings.CONTINUITY_TOOL_ROUNDS
            work = Work(
                tools=[] if last else box.specs,
                rounds=rounds,
                note=NO_MORE_ROUNDS if last else box.note,
            )
            output, recorded = round_write(
                run=run, brain=brain, context=context, plan=plan, work=work, box=box,
                asker=asker, number=number, streamed=streamed, written=[r.text for r in rounds],
            )  # fmt: skip
            if "reply" in output:
                return output
        uses = [ToolUse(**call) for call in output["calls"]]
        results = round_calls_settle(
            run=run, number=number, box=box, asker=asker, stopped=stopped, recorded=recorded
        )
        rounds.append(ToolRound(output["text"], uses, results))
        fault_point("tool_round_ended")
    raise AssertionError("unreachable: the rounds end with the reply")


def round_write(
    *,
    run: Run,
    brain: Brain,
    context: Context,
    plan: dict,
    work: Work,
    box: Toolbox,
    asker: Asker,
    number: int,
    streamed: ReplyStream,
    written: list[str],
) -> tuple[dict, list[ToolCall] | None]:
    """One model round, streamed, and checkpointed: with its calls, recorded before any of
    them runs (and the built-in ones run and stored with it: `calls_record`), or as the reply
    (`written`: the text of the rounds before it). Its output, and its calls as stored."""
    if streamed.stopped.is_set():
        raise AttemptStopped(f"Attempt {run.pk} stopped before round {number}.")
    with model_slot(brain, stopped=streamed.stopped, conversation_id=run.conversation_id):
        text, ending = streamed.collect(brain.respond(context, plan, work))
    if isinstance(ending, list) and ending and work.tools:
        uses = calls_named(ending, number=number)
        output = {"text": text, "calls": [asdict(use) for use in uses]}
        fault_point("tool_calls_recording")
        with transaction.atomic():
            recording = calls_record(run=run, number=number, uses=uses, box=box, asker=asker)
            found = checkpoint_commit(
                run,
                ROUND_STEP.format(number),
                output,
                [*streamed.store_rest(output), *recording.writes],
            )
        return output, [found[insert] for insert in recording.inserts]
    reply = "\n\n".join(part for part in [*written, text] if part.strip())
    if not reply.strip():
        raise EmptyReply(f"Attempt {run.pk}: the assistant's reply was empty.")
    output = {"reply": reply, "cut_off": True} if ending == CUT_OFF else {"reply": reply}
    checkpoint_store(run, "respond", output, streamed.store_rest(output))
    return output, None


# What a call's row holds of the model's names for it (ToolCall.tool and .call_id).
NAME_LENGTH = 128


def without_nul(value):
    """The arguments as PostgreSQL can store them: JSON without NUL characters."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {without_nul(key): without_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_nul(item) for item in value]
    return value


def calls_named(uses: list[ToolUse], *, number: int) -> list[ToolUse]:
    """The round's calls, each with an id of its own: a model that gave none, or one twice,
    gets ids made up here (every call needs its own result)."""
    seen: set[str] = set()
    named = []
    for position, use in enumerate(uses):
        use = replace(use, name=use.name[:NAME_LENGTH], arguments=without_nul(use.arguments))
        if not use.call_id or use.call_id in seen or len(use.call_id) > NAME_LENGTH:
            use = replace(use, call_id=f"call_{number}_{position}")
        seen.add(use.call_id)
        named.append(use)
    return named


def context_prepare(
    *, run: Run, message: Message, reads: ContextReads, found: store.Found, budget: int
) -> Context | None:
    """Inside the transaction that begins the attempt: assemble (from what its `reads` found)
    and store its context, or None when it needs compacting first to fit the brain's `budget`
    (the brain's summary is a slow call, made outside any transaction, by
    `context_assemble`)."""
    refs, context = context_of(message=message, attempt=run.attempt, reads=reads, found=found)
    tokens = context_tokens(context)
    if compaction_candidates(refs=refs, context=context, tokens=tokens, budget=budget):
        return None
    return context_record(run=run, message=message, refs=refs, context=context, tokens=tokens)


def context_assemble(*, run: Run, message: Message, brain: Brain) -> Context:
    """Assemble this attempt's context, compacting first when it passes the threshold, and
    store it by reference. Every attempt assembles its own: a newer handoff (a planned
    shutdown's, a staff edit) may have been written since the previous one. A summary staff
    edited during the brain's summarizing call wins: the compaction is made again from theirs,
    once; after that the context goes as it is (a model brain refuses to send a prompt too
    long, and the next attempt compacts)."""
    for compacting in (True, False):
        refs, context = context_assembled(message=message, attempt=run.attempt)
        tokens = context_tokens(context)
        budget = context_budget(brain)
        older = compacting and compaction_candidates(
            refs=refs, context=context, tokens=tokens, budget=budget
        )
        summary = None
        if older:  # outside any transaction: it may be a slow model call
            with model_slot(brain, conversation_id=run.conversation_id):
                summary = summary_bounded(
                    brain.summarize(turns_of(older), context.summary),
                    limit=summary_room(context=context, older=older, budget=budget),
                    previous=context.summary,
                )
        with transaction.atomic():
            conversation_lock(run.conversation_id)
            run_lock_owned(run)
            if summary is not None:
                if exchanges_forgotten(older):
                    continue  # a forget during the brain's call: its summary quotes them
                stored = compaction_store(
                    conversation_id=run.conversation_id,
                    covers_through_id=older[-1][0],
                    text=summary,
                    run=run,
                    based_on=refs.summary_id,
                )
                if stored is None:
                    continue
                refs, context = context_assembled(message=message, attempt=run.attempt)
                tokens = context_tokens(context)
            return context_record(
                run=run, message=message, refs=refs, context=context, tokens=tokens
            )
    raise AssertionError("unreachable: the second round never compacts")


def context_record(
    *, run: Run, message: Message, refs: ContextRefs, context: Context, tokens: int
) -> Context:
    """The last writes of the attempt's fenced transaction, which commit it: a recovery, when
    an earlier attempt on the message stopped (the context then says so), and the context, by
    reference."""
    if (
        attempt_resumes(run=run, message=message)
        and (recovery := recovery_record(run=run)) is not None
    ):
        context = replace(context, recovery=recovery_note(recovery))
    run_context_store(run=run, refs=refs, tokens=tokens)
    return context


def step(
    run: Run,
    name: str,
    stopped: Event,
    stored: dict[str, dict],
    compute: Callable[[], dict],
    *,
    apply: Callable[[dict], list[store.Query[bool]]] | None = None,
) -> dict:
    """The stored output of this step for the message, or compute it and checkpoint it (with
    the fenced writes `apply` returns, in one transaction and one round trip) before
    returning."""
    if name in stored:
        return stored[name]
    if stopped.is_set():
        raise AttemptStopped(f"Attempt {run.pk} stopped before step {name}.")
    output = compute()
    checkpoint_store(run, name, output, apply(output) if apply else None)
    return output


def checkpoint_store(
    run: Run, name: str, output: dict, writes: list[store.Query[bool]] | None
) -> None:
    """The step's checkpoint, with the fenced `writes` that go with it (None: a step that never
    has any), in one transaction and one round trip."""
    if writes is None:
        checkpoint = runs.checkpoint_insert(run=run, name=name, output=output)
        fence_held(run, store.execute(checkpoint))  # one statement: its own transaction
        return
    with transaction.atomic():
        checkpoint_commit(run, name, output, writes)


def checkpoint_commit(run: Run, name: str, output: dict, writes: list[store.Query]) -> store.Found:
    """The last statements of the caller's transaction, which commits with them: the step's
    checkpoint and its fenced `writes`, each of which must have stored its row."""
    writes = [*writes, runs.checkpoint_insert(run=run, name=name, output=output)]
    found = store.round_trip(*writes, commit=True)
    fence_held(run, *(found[write] for write in writes))
    return found


class ReplyStream:
    """Collects the reply while persisting it in ordered chunks and streaming them live. The
    last chunk is stored with the step's checkpoint (`store_rest`): one commit fewer, and a
    short reply is one commit in all."""

    def __init__(self, *, run: Run, stopped: Event) -> None:
        self.run = run
        self.stopped = stopped
        self.seq = 0
        self.rest = ""
        self.written = False  # whether a round's text was streamed: the next one is set apart

    def resume_with(self, text: str) -> None:
        """A round an earlier attempt wrote: streamed again as one chunk, so the page shows the
        whole reply so far."""
        if text.strip():
            self.seq += 1
            chunk_store(run=self.run, seq=self.seq, text=self.apart(text))

    def apart(self, text: str) -> str:
        separated = f"\n\n{text}" if self.written else text
        self.written = True
        return separated

    def collect(self, reply: Iterable[str]) -> tuple[str, object]:
        """A round's text, and what `Brain.respond` returned: its tool calls, or whether the
        model cut the text off at its length limit."""
        tokens: Iterator[str] = iter(reply)
        parts: list[str] = []
        unsent: list[str] = []
        begun = False  # the round's first words were streamed
        flushed_at = time.monotonic()
        try:
            while True:
                try:
                    token = next(tokens)
                except StopIteration as end:
                    ending = end.value
                    break
                if self.stopped.is_set():
                    raise AttemptStopped(f"Attempt {self.run.pk} stopped while replying.")
                if not begun and token.strip():
                    begun = True
                    token_shown = self.apart(token)
                else:
                    token_shown = token
                unsent.append(token_shown)
                parts.append(token)
                if time.monotonic() - flushed_at >= settings.CONTINUITY_STREAM_FLUSH_SECONDS:
                    self.seq += 1
                    chunk_store(run=self.run, seq=self.seq, text="".join(unsent))
                    unsent.clear()
                    flushed_at = time.monotonic()
        except BaseException:
            # Whatever ended it here (a stop, a fence, the database), a model brain's stream
            # closes now, not when it is collected: the server stops generating.
            if close := getattr(tokens, "close", None):
                close()
            raise
        self.rest = "".join(unsent)
        return "".join(parts), ending

    def store_rest(self, output: dict) -> list[store.Query[bool]]:
        """Inside the step's transaction, which publishes the chunk once it commits."""
        if not self.rest:
            return []
        self.seq += 1
        chunk_publish(run=self.run, seq=self.seq, text=self.rest)
        return [runs.chunk_insert(run=self.run, seq=self.seq, text=self.rest)]


def chunk_store(*, run: Run, seq: int, text: str) -> None:
    """Store one chunk, fenced, and publish it once stored."""
    fence_held(run, store.execute(runs.chunk_insert(run=run, seq=seq, text=text)))
    chunk_publish(run=run, seq=seq, text=text)


def chunk_publish(*, run: Run, seq: int, text: str) -> None:
    """After the commit of the caller's transaction, if there is one."""
    transaction.on_commit(
        lambda: publish_reply_chunk(
            conversation_id=run.conversation_id,
            message_id=run.message_id,
            run_id=run.pk,
            seq=seq,
            text=text,
        )
    )
