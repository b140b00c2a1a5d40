"""The `openai` brain under faults: real worker subprocesses stream from the fake
OpenAI-compatible server over TCP, while it fails, refuses, stalls or the worker is killed.

Each test ends with `assert_promise_kept`: every message is done or dead, answered at most once,
and in order.
"""

from __future__ import annotations

import os
import signal

import pytest

from continuity.models import (
    Alert,
    Conversation,
    CrashRecord,
    DeadLetter,
    Recovery,
    ReplyChunk,
    Run,
)
from devtools.fake_model import FakeOpenAI, reply_to, worker_settings
from tests.helpers.messages import conversations, send
from tests.helpers.processes import WatchdogProcess, WorkerProcess, process_id
from tests.helpers.promise import assert_promise_kept, run_states, steps_by_run, wait_finished
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

LONG_QUESTION = (
    "My name is Ada and I would like a careful answer about moving a busy database "
    "to a new server without any downtime for the people who use it"
)


@pytest.fixture
def fake():
    server = FakeOpenAI().start()
    yield server
    server.stop()


def openai_worker(fake: FakeOpenAI, **env: str) -> WorkerProcess:
    return WorkerProcess(
        **{
            **worker_settings(fake),
            "CONTINUITY_OPENAI_IDLE_TIMEOUT": "1",
            **env,
        }
    )


def test_a_server_error_is_retried_inside_the_step_and_answered_once(processes, fake):
    processes.add(openai_worker(fake))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    fake.fail_next(500)
    message = send(conversation, "Tell me about the weather today")
    wait_finished([message])

    message.refresh_from_db()
    assert message.state == "done" and message.attempts == 1
    assert run_states(message) == ["completed"]
    assert message.reply.text == reply_to(message.text)
    assert fake.chat_requests() == 2  # the 500, then the client's retry
    assert_promise_kept([message])


def test_a_refused_key_dead_letters_at_once_and_the_conversation_goes_on(processes, fake):
    misconfigured = processes.add(openai_worker(fake, CONTINUITY_OPENAI_API_KEY="sk-revoked"))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    first = send(conversation, "Hello there")
    second = send(conversation, "Are you there?")
    wait_finished([first, second])

    reason = f"PermanentError: The model server at {fake.url} refused the API key (401)."
    for message in (first, second):
        message.refresh_from_db()
        assert message.state == "dead"
        assert run_states(message) == ["failed"]  # no retry can fix it: dead at once
        assert DeadLetter.objects.get(message=message).reason == reason
    assert fake.chat_requests() == 2  # the client does not retry a 401 either

    misconfigured.stop()  # the operator fixes the key and restarts the worker
    processes.add(openai_worker(fake))
    after = send(conversation, "My name is Ada")
    wait_finished([after])

    after.refresh_from_db()
    assert after.state == "done"
    assert after.reply.text == reply_to("My name is Ada")
    conversation.refresh_from_db()
    assert conversation.state == Conversation.State.ACTIVE
    assert_promise_kept([first, second, after])


def test_a_model_server_that_is_down_for_a_while_costs_no_message_and_answers_in_order(
    processes, fake
):
    """More failures than the cap of interruptions, and still nothing is charged: within an
    outage the server is marked unavailable, its conversations wait, staff are told, and the
    answers resume in order once it is back (issue: 2 of 3 messages were dead-lettered)."""
    port, settings = fake.server.server_address[1], worker_settings(fake)
    fake.stop()  # down: every connection is refused
    outage = {
        "CONTINUITY_BACKEND_BACKOFF_SECONDS": "0.2,0.5,1,2",
        "CONTINUITY_MAX_INTERRUPTIONS": "3",
        "CONTINUITY_OPENAI_MAX_RETRIES": "0",
    }
    processes.add(WorkerProcess(**settings, **outage))
    processes.add(WatchdogProcess(**outage))
    (conversation,) = conversations(1)
    sent = [send(conversation, f"Question number {n}") for n in range(3)]

    wait_for(
        lambda: Run.objects.filter(state="interrupted").count() >= 5,
        timeout=60,
        what="five tries of the model server while it is down",
    )
    assert Alert.objects.filter(kind="model_unavailable").count() == 1
    fake.start(port=port)
    wait_finished(sent)

    for message in sent:
        message.refresh_from_db()
        assert (message.state, message.attempts) == ("done", 1), message.state
        assert message.reply.text == reply_to(message.text)
    assert not DeadLetter.objects.exists() and not CrashRecord.objects.exists()
    conversation.refresh_from_db()
    assert conversation.state == Conversation.State.ACTIVE
    assert_promise_kept(sent)


def test_a_stalled_stream_fails_at_the_idle_timeout_and_a_later_attempt_answers(processes, fake):
    processes.add(openai_worker(fake))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    fake.stall_after(words=3)
    message = send(conversation, "Please plan my week in three short steps")

    failed = wait_for(
        lambda: message.runs.filter(state="failed").first(),
        timeout=30,
        what="the stalled attempt to fail",
    )
    assert failed.error == (
        f"ModelTimeout: The model server at {fake.url} sent no token for 1 s "
        f"(model '{fake.model}')."
    )
    last_chunk = ReplyChunk.objects.filter(run=failed).order_by("seq").last()
    assert last_chunk.text  # part of the reply was streamed before the server went silent
    silence = (failed.ended_at - last_chunk.created_at).total_seconds()
    assert 0.9 <= silence < 5, silence
    wait_finished([message])

    message.refresh_from_db()
    assert message.state == "done"
    assert run_states(message) == ["failed", "completed"]
    assert message.reply.text == reply_to(message.text)
    assert fake.chat_requests() == 2
    assert_promise_kept([message])


def test_sigkill_mid_stream_regenerates_the_reply_once(processes, fake):
    fake.delay = 0.1  # about three seconds of streaming
    worker = processes.add(openai_worker(fake))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, LONG_QUESTION)

    run = wait_streaming(message)
    assert process_id(run) in worker.children()
    os.kill(process_id(run), signal.SIGKILL)
    wait_finished([message])

    message.refresh_from_db()
    assert message.state == "done" and message.attempts == 2
    assert run_states(message) == ["crashed", "completed"]
    # The plan is reused from the checkpoint; the reply is generated again, from the start.
    assert steps_by_run(message) == {"plan": run.pk, "respond": "retry", "remember": "retry"}
    assert message.reply.text == reply_to(LONG_QUESTION)
    assert fake.chat_requests() == 2
    assert (
        "was interrupted (a worker process stopped)"
        in fake.streamed()[-1]["messages"][0]["content"]
    )
    assert Recovery.objects.filter(message=message).count() == 1
    assert_promise_kept([message])


def test_a_server_that_freezes_mid_reply_charges_no_attempt_and_counts_as_down(processes, fake):
    processes.add(openai_worker(fake))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    fake.freeze_after(words=3)
    message = send(conversation, "Please plan my week in three short steps")

    given_back = wait_for(
        lambda: message.runs.exclude(state="running").first(),
        timeout=30,
        what="the frozen attempt to end",
    )
    assert given_back.state == "interrupted"
    assert given_back.error == (
        f"Model server unavailable: The model server at {fake.url} sent no token for 1 s "
        "mid-reply, and then answered nothing at all."
    )
    assert ReplyChunk.objects.filter(run=given_back).exists()  # it froze mid-reply
    message.refresh_from_db()
    assert (message.attempts, message.state) == (0, "queued")  # not the message's fault
    fake.thaw()
    wait_finished([message])

    message.refresh_from_db()
    assert message.state == "done" and message.attempts == 1
    assert run_states(message) == ["interrupted", "completed"]
    assert not CrashRecord.objects.exists()
    assert_promise_kept([message])


def test_a_model_that_calls_a_built_in_tool_reads_its_result_in_the_next_round(processes, fake):
    """A worker, the openai brain and the fake server: the model asks for `remember` (its
    calls streamed), the worker runs it once, and the model's next round is the reply."""
    from continuity.models import MemoryFact, ToolCall

    processes.add(openai_worker(fake))
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    fake.call_tools_next(("remember", {"fact": "The user likes tea"}))
    message = send(conversation, "Keep in mind that tea is my drink")

    wait_finished([message])

    call = ToolCall.objects.get(message=message)
    assert (call.tool, call.state, call.runs, call.round) == ("remember", "done", 1, 1)
    assert call.result == "Remembered (note): The user likes tea"
    assert MemoryFact.objects.current().filter(value="The user likes tea").exists()
    message.refresh_from_db()
    assert message.reply.text == reply_to(message.text)
    first, second = fake.streamed()[-2:]
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "search_conversations",
        "remember",
        "forget",
        "set_reminder",
        "calculate",
    ]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call.call_id,
        "content": "Remembered (note): The user likes tea",
    }
    assert_promise_kept([message])
