"""The promise under faults, proven with real worker processes, real signals, PostgreSQL and Redis.

Every test ends with `assert_promise_kept`: each accepted message is done or dead, no message has
two replies, and replies come in order within each conversation.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import signal
import time
from pathlib import Path

import pytest
import redis
from django.conf import settings

from continuity.actions import conversation_resume
from continuity.context.assembly import run_context_text
from continuity.context.recoveries import recovery_sentence
from continuity.delivery.drains import drains_waiting
from continuity.delivery.processing import drain_conversation
from continuity.models import (
    Alert,
    Conversation,
    CrashRecord,
    DeadLetter,
    MemoryFact,
    Message,
    Recovery,
    Run,
)
from tests.helpers.brains import HANG, KILL_ALWAYS, KILL_FIRST_ATTEMPT, SLEEP
from tests.helpers.factories import UserFactory
from tests.helpers.messages import conversations, send
from tests.helpers.processes import WatchdogProcess, WorkerProcess, process_id
from tests.helpers.promise import (
    LONG_REPLY,
    assert_promise_kept,
    run_states,
    steps_by_run,
    wait_finished,
)
from tests.helpers.redis_server import session_redis_server
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

SLOW = {"CONTINUITY_BUILTIN_TOKEN_DELAY": "0.05"}  # replies take about two seconds
FAULTY = {"CONTINUITY_BRAIN": "faulty"}


def drains_held(broker: redis.Redis, conversation_id: int) -> list[str]:
    """The ids of the conversation's drains that the broker holds: queued, or delivered and not
    yet acknowledged (kombu's "unacked" hash). Only this conversation's: the session's Redis also
    holds what earlier tests' workers left, a drain delivered to a worker SIGKILLed at teardown
    stays unacknowledged there for the visibility timeout (an hour)."""
    queued = [json.loads(raw) for raw in broker.lrange("celery", 0, -1)]
    delivered = [json.loads(raw)[0] for raw in broker.hvals("unacked")]
    return [
        message["headers"]["id"]
        for message in queued + delivered
        if message["headers"]["task"] == "continuity.drain_conversation"
        and json.loads(base64.b64decode(message["body"]))[0] == [conversation_id]
    ]


def test_sigkill_of_the_worker_child_mid_reply(processes):
    worker = processes.add(WorkerProcess(**SLOW))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, LONG_REPLY)

    run = wait_streaming(message)
    assert process_id(run) in worker.children()
    os.kill(process_id(run), signal.SIGKILL)
    wait_finished([message])

    message.refresh_from_db()
    assert message.state == "done" and message.attempts == 2
    assert run_states(message) == ["crashed", "completed"]
    assert CrashRecord.objects.get().run_id == run.pk
    assert steps_by_run(message) == {
        "plan": run.pk,
        "respond": "retry",
        "remember": "retry",
    }
    assert "Ada" in message.reply.text
    assert_promise_kept([message])


def test_a_killed_pool_process_has_its_attempt_ended_by_its_worker_at_once(processes):
    """The worker's main process learns of the death from billiard and ends the attempt: no
    waiting for a stale heartbeat, which here would take far longer than the test."""
    slow_heartbeats = {"CONTINUITY_HEARTBEAT_SECONDS": "600"}
    worker = processes.add(WorkerProcess(**SLOW, **slow_heartbeats))
    processes.add(WatchdogProcess(**slow_heartbeats))
    (conversation,) = conversations(1)
    message = send(conversation, LONG_REPLY)

    run = wait_streaming(message)
    os.kill(process_id(run), signal.SIGKILL)
    wait_finished([message])

    crash = CrashRecord.objects.get(run=run)
    assert crash.detected_by == "pool" and "signal 9 (SIGKILL)" in crash.run.error
    assert run_states(message) == ["crashed", "completed"]
    # The crash's backoff (0.5 s with the suite's clocks) was waited out, not skipped.
    retried = message.runs.order_by("id").last()
    assert (retried.started_at - crash.detected_at).total_seconds() >= 0.5
    assert "Pool process" in worker.log() and "1 attempt(s) ended" in worker.log()
    assert_promise_kept([message])


def test_sigkill_of_the_whole_worker_is_recovered_by_the_watchdog_not_the_broker(processes):
    first = processes.add(WorkerProcess(**SLOW))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, LONG_REPLY)

    run = wait_streaming(message)
    first.kill_all()  # main process and its children, as when a host dies
    processes.add(WorkerProcess(**SLOW))  # another node: nothing of the old one survives
    wait_finished([message])

    message.refresh_from_db()
    final = message.runs.order_by("id").last()
    recovery = (final.started_at - run.heartbeat_at).total_seconds()
    visibility_timeout = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    assert recovery < visibility_timeout / 100, (recovery, visibility_timeout)
    assert CrashRecord.objects.get(run=run).detected_by in {"watchdog", "worker_start"}
    assert run_states(message) == ["crashed", "completed"]
    assert_promise_kept([message])


def test_a_restarted_node_reaps_its_previous_incarnation_at_start(processes):
    node = f"phoenix-{os.getpid()}@testhost"
    first = processes.add(WorkerProcess(node=node, **SLOW))
    (conversation,) = conversations(1)
    message = send(conversation, LONG_REPLY)

    run = wait_streaming(message)
    first.kill_all()
    # This watchdog would call the attempt dead only after a minute: the reaping is the new
    # incarnation's, and the watchdog merely re-enqueues once the backoff has passed.
    processes.add(WatchdogProcess(CONTINUITY_HEARTBEAT_SECONDS="30"))
    processes.add(WorkerProcess(node=node, **SLOW))
    wait_finished([message])

    assert CrashRecord.objects.get(run=run).detected_by == "worker_start"
    assert run_states(message) == ["crashed", "completed"]
    assert_promise_kept([message])


def test_a_kill_after_the_reply_commit_but_before_the_ack_is_absorbed(processes, tmp_path):
    marker = tmp_path / "fault-fired"
    worker = processes.add(
        WorkerProcess(
            CONTINUITY_FAULT_KILL_AT="after_reply_committed",
            CONTINUITY_FAULT_ONCE_FILE=str(marker),
        )
    )
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    first = send(conversation, "My name is Grace")
    wait_finished([first])
    second = send(conversation, "What's my name?")
    wait_finished([second])

    assert marker.exists()
    killed = process_id(first.runs.get())
    wait_for(
        lambda: killed not in worker.children() and len(worker.children()) == 2,
        timeout=10,
        what=f"the worker to replace its killed child {killed}",
    )

    def redelivered() -> set[str]:
        received = re.findall(r"drain_conversation\[([0-9a-f-]+)\] received", worker.log())
        return {task for task in received if received.count(task) > 1}

    wait_for(redelivered, timeout=10, what="the killed task to be delivered again")
    assert [run_states(first), run_states(second)] == [["completed"], ["completed"]]
    assert second.reply.text == "Your name is **Grace**."
    assert_promise_kept([first, second])


def stopped(pid: int) -> bool:
    """Whether the process is frozen by a stop signal (state T in /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].startswith("T")


def test_a_worker_frozen_inside_the_locked_span_holds_its_conversation_for_seconds(
    processes, tmp_path
):
    """A pool process that SIGSTOPs itself while it holds the conversation's lock (inside the
    transaction that begins an attempt): the server ends its session once it has been idle in
    the transaction for DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS (5 s), below the 10 s a send
    waits for the lock, so a send made meanwhile is accepted, and the other pool process
    answers both messages, once, in order, with no attempt charged to the frozen one."""
    marker = tmp_path / "fault-fired"
    worker = processes.add(
        WorkerProcess(
            CONTINUITY_FAULT_KILL_AT="attempt_locked",
            CONTINUITY_FAULT_SIGNAL="SIGSTOP",
            CONTINUITY_FAULT_ONCE_FILE=str(marker),
        )
    )
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    first = send(conversation, "My name is Grace")
    wait_for(marker.exists, timeout=10, what="a pool process to freeze inside the locked span")
    wait_for(
        lambda: any(stopped(pid) for pid in worker.children()),
        timeout=5,
        what="the pool process to be stopped",
    )
    (frozen,) = [pid for pid in worker.children() if stopped(pid)]
    try:
        # Waits for the lock until the server ends the frozen session: no LockNotAvailable.
        second = send(conversation, "What's my name?")
        wait_finished([first, second])
        assert [run_states(first), run_states(second)] == [["completed"], ["completed"]]
        assert Message.objects.get(pk=first.pk).attempts == 1
        assert first.reply.text == "Nice to meet you, **Grace**! I'll remember your name."
        assert second.reply.text == "Your name is **Grace**."
        assert not CrashRecord.objects.exists()
    finally:
        os.kill(frozen, signal.SIGCONT)
    # Woken, the frozen process finds its session ended (its attempt never began): its task
    # ends too (a retry of the drain, which finds nothing to do), and nothing is written twice.
    frozen_task = re.findall(r"drain_conversation\[([0-9a-f-]+)\] received", worker.log())[0]
    wait_for(
        lambda: re.search(rf"{frozen_task}\] retry: .*OperationalError", worker.log()),
        timeout=10,
        what="the thawed process to find its session ended",
    )
    assert_promise_kept([first, second])
    assert [run_states(first), run_states(second)] == [["completed"], ["completed"]]


def test_sigterm_mid_reply_interrupts_and_the_next_worker_completes(processes):
    worker = processes.add(WorkerProcess(**SLOW))
    (conversation,) = conversations(1)
    message = send(conversation, LONG_REPLY)

    run = wait_streaming(message)
    worker.signal(signal.SIGTERM)
    worker.popen.wait(timeout=30)
    run.refresh_from_db()
    message.refresh_from_db()
    assert run.state == "interrupted" and "Planned shutdown" in run.error
    assert (message.state, message.attempts) == ("queued", 0)

    processes.add(WorkerProcess(**SLOW))
    wait_finished([message])
    message.refresh_from_db()
    assert run_states(message) == ["interrupted", "completed"]
    assert steps_by_run(message)["plan"] == run.pk  # resumed from the interrupted attempt
    assert message.attempts == 1
    assert not CrashRecord.objects.exists()
    assert_promise_kept([message])


def test_sigterm_mid_conversation_leaves_a_handoff_that_the_next_run_is_given(processes):
    worker = processes.add(WorkerProcess(**SLOW))
    (conversation,) = conversations(1)
    earlier = send(conversation, "My goal is to finish the migration")
    wait_finished([earlier])
    message = send(conversation, LONG_REPLY)

    run = wait_streaming(message)
    worker.signal(signal.SIGTERM)
    worker.popen.wait(timeout=30)
    handoff = conversation.handoffs.order_by("-version").first()
    assert (handoff.reason, handoff.run_id, handoff.author) == ("planned_shutdown", run.pk, None)
    assert handoff.current_state.startswith(f"Interrupted while answering: “{LONG_REPLY}”")
    assert "Working on: finish the migration" in handoff.current_state  # from the newest one
    assert handoff.next_steps.startswith("Answer the interrupted message")

    processes.add(WorkerProcess(**SLOW))
    wait_finished([message])
    resumed = message.runs.get(state="completed")
    assert resumed.context.handoff == handoff
    assert "Working memory (handoff v" in run_context_text(resumed.context)
    assert "Planned shutdown" in run_context_text(resumed.context)
    assert "Interrupted" not in conversation.handoffs.order_by("-version").first().current_state
    # The banner at that point of the conversation says it was a planned restart.
    recovery = Recovery.objects.get(message=message)
    assert (recovery.kind, recovery.run_id, recovery.interrupted_run_id) == (
        "planned_shutdown",
        resumed.pk,
        run.pk,
    )
    assert recovery_sentence(recovery).startswith("I was interrupted at ")
    assert "(a planned restart) and picked up" in recovery_sentence(recovery)
    assert "interrupted" not in Message.objects.get(reply_to=message).text
    assert_promise_kept([earlier, message])


@pytest.mark.parametrize("loss", ["restart", "flushall"])
def test_messages_queued_in_a_redis_that_loses_them_are_all_processed_once(processes, loss):
    redis_server = session_redis_server()
    broker = redis.Redis.from_url(redis_server.url)
    broker.delete("celery")  # drains sent by earlier in-process tests
    first, second = conversations(2)
    messages = [
        send(c, f"Remember that note {i} is safe") for i in range(3) for c in (first, second)
    ]
    assert broker.llen("celery") == 2  # one waiting drain per conversation, not per message
    if loss == "restart":
        redis_server.restart()
    else:
        broker.flushall()
    assert broker.llen("celery") == 0

    processes.add(WorkerProcess())
    processes.add(WatchdogProcess())
    wait_finished(messages)

    assert set(
        Message.objects.filter(pk__in=[m.pk for m in messages]).values_list("state", flat=True)
    ) == {"done"}
    assert Run.objects.count() == len(messages)
    assert_promise_kept(messages)


def test_redis_restart_while_workers_are_busy(processes):
    processes.add(WorkerProcess(**SLOW))
    processes.add(WatchdogProcess())
    chats = conversations(3)
    messages = [send(c, LONG_REPLY) for c in chats]
    wait_streaming(messages[0])
    session_redis_server().restart()
    messages += [send(c, "What's my name?") for c in chats]
    wait_finished(messages, timeout=90)

    # Losing the broker is not the attempts' fault: none of them was counted as a crash.
    assert not CrashRecord.objects.exists()
    assert set(
        Message.objects.filter(pk__in=[m.pk for m in messages]).values_list("state", flat=True)
    ) == {"done"}
    assert_promise_kept(messages)


def test_a_poison_message_is_dead_lettered_and_isolated(processes):
    processes.add(WorkerProcess(**FAULTY))
    processes.add(WatchdogProcess())
    poisoned, other = conversations(2)
    poison = send(poisoned, f"{KILL_ALWAYS} {LONG_REPLY}")
    after = send(poisoned, "My name is Bob")
    elsewhere = send(other, "hello")
    wait_finished([poison, after, elsewhere])

    poison.refresh_from_db()
    assert poison.state == "dead"
    assert poison.attempts == settings.CONTINUITY_MAX_ATTEMPTS == 3
    assert run_states(poison) == ["crashed"] * 3
    dead_letter = DeadLetter.objects.get(message=poison)
    assert dead_letter.payload["text"] == poison.text
    assert [a["state"] for a in dead_letter.attempts] == ["crashed"] * 3
    assert all(a["worker"] and a["started_at"] and a["error"] for a in dead_letter.attempts)
    after.refresh_from_db()
    elsewhere.refresh_from_db()
    assert (after.state, elsewhere.state) == ("done", "done")
    poisoned.refresh_from_db()
    assert poisoned.state == "active"
    assert_promise_kept([poison, after, elsewhere])


def test_a_message_that_keeps_raising_is_retried_then_dead_lettered(processes):
    processes.add(WorkerProcess(**FAULTY))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    failing = send(conversation, "[[raise]] please")
    invalid = send(conversation, "[[invalid]] please")
    fine = send(conversation, "hello")
    wait_finished([failing, invalid, fine])

    assert run_states(failing) == ["failed"] * 3
    assert "RuntimeError: The brain tripped" in failing.runs.first().error
    assert "Traceback" in failing.runs.first().traceback
    assert run_states(invalid) == ["failed"]  # no retry can fix it: dead at once
    assert DeadLetter.objects.filter(message__in=[failing, invalid]).count() == 2
    fine.refresh_from_db()
    assert fine.state == "done"
    assert_promise_kept([failing, invalid, fine])


def test_hung_attempts_are_ended_by_the_time_limits(processes, settings):
    limits = {"CELERY_TASK_SOFT_TIME_LIMIT": "1", "CELERY_TASK_TIME_LIMIT": "2"}
    # The sender puts its limits into each task message, so this process sends them too.
    settings.CELERY_TASK_SOFT_TIME_LIMIT, settings.CELERY_TASK_TIME_LIMIT = 1, 2
    processes.add(WorkerProcess(**limits, **FAULTY))
    processes.add(WatchdogProcess(**limits))
    slow_chat, hung_chat = conversations(2)
    slow = send(slow_chat, f"{SLEEP} please")
    hung = send(hung_chat, f"{HANG} please")
    after = send(hung_chat, "hello")
    wait_finished([slow, hung, after], timeout=90)

    # The soft limit raises inside the attempt: a failure, retried, then dead-lettered.
    assert run_states(slow) == ["failed"] * 3
    assert "SoftTimeLimitExceeded" in slow.runs.first().error
    # An attempt that swallows it is killed by the hard limit; its heartbeat stops: a crash.
    assert run_states(hung) == ["crashed"] * 3
    assert Message.objects.get(pk=hung.pk).state == "dead"
    assert Message.objects.get(pk=after.pk).state == "done"
    assert_promise_kept([slow, hung, after])


def test_three_crashes_within_the_window_pause_the_conversation_until_resumed(processes):
    worker = processes.add(WorkerProcess(**FAULTY))
    watchdog = processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    crashing = [send(conversation, f"{KILL_FIRST_ATTEMPT} {LONG_REPLY} ({i})") for i in range(3)]

    wait_for(
        lambda: Conversation.objects.get(pk=conversation.pk).state == "paused",
        timeout=60,
        what="the conversation to be paused",
    )
    alert = Alert.objects.get(conversation=conversation)
    assert "3 crashes" in alert.text
    assert "paused" in worker.log() + watchdog.log()
    crashing[2].refresh_from_db()
    assert crashing[2].state == "queued"

    # Paused: a new message is stored and its drain runs, but nothing is processed.
    later = send(conversation, "What's my name?")
    broker = redis.Redis.from_url(session_redis_server().url)
    wait_for(  # taken from the queue, run, and acknowledged: the broker holds none of its drains
        lambda: not (drains_held(broker, conversation.pk) or drains_waiting([conversation.pk])),
        timeout=10,
        what="the drain of the paused conversation",
    )
    later.refresh_from_db()
    assert later.state == "queued" and later.attempts == 0

    conversation_resume(conversation=conversation, by=UserFactory(is_staff=True), reason="fixed")
    wait_finished([*crashing, later])
    assert run_states(crashing[2]) == ["crashed", "completed"]
    later.refresh_from_db()
    assert later.reply.text == "Your name is **Ada**."
    assert_promise_kept([*crashing, later])


def test_crashes_between_answers_given_at_the_first_try_pause_nothing(processes):
    """Three crashes within the window, but the conversation answers a message at its first
    try between each: it goes on answering, so it is not in a crash loop (a host that keeps
    losing processes is not the conversation's fault)."""
    processes.add(WorkerProcess(**FAULTY))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    sent = []
    for i in range(3):
        sent.append(send(conversation, f"{KILL_FIRST_ATTEMPT} {LONG_REPLY} ({i})"))
        sent.append(send(conversation, f"Note number {i}."))
    wait_finished(sent)

    assert CrashRecord.objects.filter(conversation=conversation).count() == 3
    assert Conversation.objects.get(pk=conversation.pk).state == "active"
    assert not Alert.objects.filter(conversation=conversation).exists()
    assert [run_states(m) for m in sent[1::2]] == [["completed"]] * 3
    assert_promise_kept(sent)


def test_twenty_messages_over_four_conversations_with_random_child_kills(processes):
    worker = processes.add(
        WorkerProcess(
            CONTINUITY_BUILTIN_TOKEN_DELAY="0.015",
            CONTINUITY_MAX_ATTEMPTS="20",
            CONTINUITY_PAUSE_AFTER_CRASHES="100",
        )
    )
    processes.add(WatchdogProcess())
    rng = random.Random(8)
    chats = conversations(4)
    messages = [send(chats[i % 4], f"{LONG_REPLY} Message {i}.") for i in range(20)]
    ids = [m.pk for m in messages]

    def busy_or_finished():
        if not Message.objects.filter(pk__in=ids, state__in=Message.WAITING_STATES).exists():
            return "finished"
        return Run.objects.filter(state="running", reply_chunks__isnull=False).exists()

    kills = 0
    while kills < 6 and wait_for(busy_or_finished, timeout=60, what="work to disrupt") is True:
        time.sleep(rng.uniform(0, 0.3))  # a random moment of the reply, not a wait for a result
        children = worker.children()
        if children:
            os.kill(rng.choice(children), signal.SIGKILL)
            kills += 1
    wait_finished(messages, timeout=120)

    assert kills == 6
    assert 1 <= CrashRecord.objects.count() <= kills
    assert set(Message.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"done"}
    assert_promise_kept(messages)


def test_a_stopped_worker_child_that_wakes_after_being_reaped_writes_nothing(processes):
    worker = processes.add(WorkerProcess(**SLOW))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, LONG_REPLY)

    zombie = wait_streaming(message)
    pid = process_id(zombie)
    assert pid in worker.children()
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_finished([message])
        zombie.refresh_from_db()
        assert zombie.state == "crashed"
        written = {
            "checkpoints": set(zombie.checkpoints.values_list("pk", flat=True)),
            "chunks": set(zombie.reply_chunks.values_list("pk", flat=True)),
        }
        facts = set(MemoryFact.objects.values_list("key", "value", "updated_at"))
        assert {key for key, _, _ in facts} >= {"name"}
    finally:
        os.kill(pid, signal.SIGCONT)
    # Woken, it carries on streaming until its heartbeat or its next write finds the run ended;
    # then the attempt is over.
    wait_for(
        lambda: f"Attempt stopped: Attempt {zombie.pk} " in worker.log(),
        timeout=20,
        what=f"the woken attempt in process {pid} to give up",
    )

    message.refresh_from_db()
    assert "Ada" in message.reply.text
    assert set(zombie.checkpoints.values_list("pk", flat=True)) == written["checkpoints"]
    assert set(zombie.reply_chunks.values_list("pk", flat=True)) == written["chunks"]
    assert not {"respond", "remember"} & set(zombie.checkpoints.values_list("step", flat=True))
    assert set(MemoryFact.objects.values_list("key", "value", "updated_at")) == facts
    assert message.runs.get(state="completed").pk != zombie.pk
    assert Run.objects.get(pk=zombie.pk).state == "crashed"
    assert_promise_kept([message])


def test_a_drain_killed_between_two_of_its_messages_is_redelivered_for_the_rest(
    processes, tmp_path
):
    """A drain answers its conversation's queued messages in turn, with no task for each. The
    task is acknowledged when it returns: a worker killed right after a reply's commit, before
    the next attempt began (the first reply, which may title the conversation, commits alone),
    gives it back to the queue, and the rest are answered. No watchdog runs here, and the
    worker's start-up sweep would re-enqueue only after an hour."""
    marker = tmp_path / "fault-fired"
    (conversation,) = conversations(1)
    sent = [send(conversation, f"Note number {n}") for n in range(4)]  # one drain for all four
    processes.add(
        WorkerProcess(
            CONTINUITY_FAULT_KILL_AT="after_reply_committed",
            CONTINUITY_FAULT_ONCE_FILE=str(marker),
            CONTINUITY_REQUEUE_AFTER_SECONDS="3600",
            CONTINUITY_DRAIN_SLICE_SECONDS="60",
        )
    )
    wait_finished(sent, timeout=30)
    assert marker.exists()
    assert [run.state for run in Run.objects.order_by("id")] == ["completed"] * 4
    assert_promise_kept(sent)


def test_a_kill_after_a_reply_that_began_the_next_attempt_recovers_that_attempt(
    processes, tmp_path
):
    """Within a drain's slice, the attempt on the next message begins in the transaction that
    stores the previous reply (after a first exchange, which may title the conversation, it
    begins in its own). A worker killed right after that commit killed the next attempt: it is
    recovered as any crashed one is, and nothing is lost, repeated or reordered."""
    marker = tmp_path / "fault-fired"
    (conversation,) = conversations(1)
    send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)  # the first exchange, answered here
    notes = [send(conversation, f"Note number {n}") for n in range(3)]
    processes.add(WatchdogProcess())
    processes.add(
        WorkerProcess(
            CONTINUITY_FAULT_KILL_AT="after_reply_committed",
            CONTINUITY_FAULT_ONCE_FILE=str(marker),
            CONTINUITY_DRAIN_SLICE_SECONDS="60",
        )
    )
    wait_finished(notes)
    assert marker.exists()
    assert [run_states(note) for note in notes] == [
        ["completed"],
        ["crashed", "completed"],
        ["completed"],
    ]
    assert CrashRecord.objects.filter(message=notes[1]).count() == 1
    assert_promise_kept(notes)


@pytest.mark.parametrize("first_text", ["My name is Ada", "[[invalid]] please"])
def test_without_the_watchdog_the_next_message_starts_once_the_previous_one_ends(
    processes, first_text
):
    """The follow-up enqueue after a reply or a dead letter is what starts the next message: no
    watchdog runs here, and the worker's start-up sweep would re-enqueue only after an hour."""
    (conversation,) = conversations(1)
    first = send(conversation, first_text)
    second = send(conversation, "What's my name?")  # its drain is the one still waiting: none
    processes.add(WorkerProcess(CONTINUITY_REQUEUE_AFTER_SECONDS="3600", **FAULTY))
    wait_finished([first, second], timeout=10)
    first.refresh_from_db()
    assert first.state == ("done" if first_text.startswith("My") else "dead")
    assert Message.objects.get(pk=second.pk).state == "done"
    assert_promise_kept([first, second])
