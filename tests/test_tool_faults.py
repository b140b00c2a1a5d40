"""Tool calls under SIGKILL, with real worker processes and the real MCP test server: each
case counts the ledger's entries per idempotency key, the effect that must not happen twice
unless a person chose Run again.

(a) killed before the round's calls are recorded: the call runs once, later;
(b) killed while the ledger tool runs: in doubt, not run again; Run again runs it once more,
    with the same key;
(c) killed after the tool returned, before its result was stored: in doubt for the ledger
    tool (Skip leaves it at one run); run again by itself, with the same key, for the
    idempotent tool;
(d) killed between two rounds: the first round's calls are not run again.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter

import pytest

from continuity.actions import tool_call_decide
from continuity.database.clock import database_now
from continuity.models import Conversation, Message, Run, ToolCall
from devtools.mcp_server import ledger_lines
from tests.helpers.brains import tool_trigger
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import conversations, send
from tests.helpers.processes import (
    McpServerProcess,
    WatchdogProcess,
    WebProcess,
    WorkerProcess,
    process_id,
)
from tests.helpers.promise import assert_promise_kept, wait_finished
from tests.helpers.tool_servers import ledger_server, ledger_servers_env
from tests.helpers.waiting import wait_for
from tests.helpers.web import SignedInBrowser

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def tool_server(processes):
    return processes.add(McpServerProcess())


def tool_worker(processes, tool_server, **env: str) -> WorkerProcess:
    servers = ledger_servers_env(tool_server.url)
    return processes.add(
        WorkerProcess(CONTINUITY_BRAIN="faulty", CONTINUITY_MCP_SERVERS=servers, **env)
    )


def runs_per_key(tool_server, tool: str) -> Counter:
    return Counter(line["key"] for line in ledger_lines(tool_server.ledger) if line["tool"] == tool)


def run_states(message: Message) -> list[str]:
    return list(message.runs.order_by("id").values_list("state", flat=True))


def in_doubt(message: Message) -> ToolCall:
    return wait_for(
        lambda: ToolCall.objects.filter(message=message, state="in_doubt").first(),
        timeout=30,
        what="the call to be held in doubt",
    )


def test_a_kill_before_the_calls_are_recorded_runs_the_call_once_later(
    processes, tool_server, tmp_path
):
    tool_worker(
        processes,
        tool_server,
        CONTINUITY_FAULT_KILL_AT="tool_calls_recording",
        CONTINUITY_FAULT_ONCE_FILE=str(tmp_path / "fired"),
    )
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, tool_trigger("ledger_append", entry="rent"))

    wait_finished([message])

    assert (tmp_path / "fired").exists()
    assert run_states(message) == ["crashed", "completed"]
    call = ToolCall.objects.get(message=message)
    assert (call.state, call.runs) == ("done", 1)
    assert runs_per_key(tool_server, "ledger_append") == {str(call.key): 1}
    assert "Appended 'rent'" in Message.objects.get(reply_to=message).text
    assert_promise_kept([message])


def test_a_kill_while_the_ledger_tool_runs_leaves_it_in_doubt_until_run_again(
    processes, tool_server
):
    tool_worker(processes, tool_server)
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, tool_trigger("ledger_append", entry="rent", first_wait=30))
    wait_for(
        lambda: runs_per_key(tool_server, "ledger_append"),
        timeout=30,
        what="the ledger tool to be running",
    )
    running = Run.objects.get(message=message, state="running")
    os.kill(process_id(running), signal.SIGKILL)

    call = in_doubt(message)
    conversation.refresh_from_db()
    assert conversation.state == Conversation.State.DECIDING
    assert runs_per_key(tool_server, "ledger_append") == {str(call.key): 1}
    assert not Message.objects.filter(reply_to=message).exists()
    assert Message.objects.get(pk=message.pk).state == "queued"  # given back, not dead

    tool_call_decide(call=call, choice="run_again", by=conversation.owner)
    wait_finished([message])

    call.refresh_from_db()
    assert (call.state, call.runs, call.decision) == ("done", 2, "run_again")
    assert runs_per_key(tool_server, "ledger_append") == {str(call.key): 2}  # the same key
    assert run_states(message) == ["crashed", "interrupted", "completed"]
    assert "The person chose Run again" in Message.objects.get(reply_to=message).text
    assert_promise_kept([message])


def test_a_kill_after_the_ledger_tool_returned_is_in_doubt_and_skip_runs_it_no_more(
    processes, tool_server, tmp_path
):
    tool_worker(
        processes,
        tool_server,
        CONTINUITY_FAULT_KILL_AT="tool_call_returned",
        CONTINUITY_FAULT_ONCE_FILE=str(tmp_path / "fired"),
    )
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, tool_trigger("ledger_append", entry="rent"))

    call = in_doubt(message)
    tool_call_decide(call=call, choice="skip", by=conversation.owner)
    wait_finished([message])

    call.refresh_from_db()
    assert (call.state, call.runs, call.decision) == ("skipped", 1, "skip")
    assert runs_per_key(tool_server, "ledger_append") == {str(call.key): 1}
    assert "The person chose Skip" in Message.objects.get(reply_to=message).text
    assert Conversation.objects.get(pk=conversation.pk).state == Conversation.State.ACTIVE
    assert_promise_kept([message])


def test_a_kill_after_the_idempotent_tool_returned_runs_it_again_with_the_same_key(
    processes, tool_server, tmp_path
):
    tool_worker(
        processes,
        tool_server,
        CONTINUITY_FAULT_KILL_AT="tool_call_returned",
        CONTINUITY_FAULT_ONCE_FILE=str(tmp_path / "fired"),
    )
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, tool_trigger("set_value", name="colour", value="teal"))

    wait_finished([message])

    call = ToolCall.objects.get(message=message)
    assert (call.state, call.runs, call.runs_again_safely) == ("done", 2, True)
    assert runs_per_key(tool_server, "set_value") == {str(call.key): 2}
    assert run_states(message) == ["crashed", "completed"]
    assert not ToolCall.objects.filter(state="in_doubt").exists()
    assert_promise_kept([message])


def test_a_kill_between_two_rounds_runs_no_call_of_the_first_again(
    processes, tool_server, tmp_path
):
    tool_worker(
        processes,
        tool_server,
        CONTINUITY_FAULT_KILL_AT="tool_round_ended",
        CONTINUITY_FAULT_ONCE_FILE=str(tmp_path / "fired"),
    )
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    text = tool_trigger("ledger_append", entry="rent") + tool_trigger("lookup", word="ledger")
    message = send(conversation, text)

    wait_finished([message])

    calls = list(ToolCall.objects.filter(message=message).order_by("position"))
    assert [(call.tool, call.state, call.runs) for call in calls] == [
        ("ledger_append", "done", 1),
        ("lookup", "done", 1),
    ]
    assert runs_per_key(tool_server, "ledger_append") == {str(calls[0].key): 1}
    assert runs_per_key(tool_server, "lookup") == {str(calls[1].key): 1}
    assert run_states(message) == ["crashed", "completed"]
    assert_promise_kept([message])


def test_the_decision_is_the_owners_alone(client, processes, tool_server):
    """Another person's call is no call at all (404); a choice that is neither is refused."""
    tool_worker(processes, tool_server)
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, tool_trigger("ledger_append", entry="rent", first_wait=30))
    wait_for(lambda: runs_per_key(tool_server, "ledger_append"), timeout=30, what="the call")
    os.kill(process_id(Run.objects.get(message=message, state="running")), signal.SIGKILL)
    call = in_doubt(message)
    url = f"/c/{conversation.pk}/tool-calls/{call.pk}/decide/"

    client.force_login(UserFactory())
    assert client.post(url, {"choice": "run_again"}).status_code == 404
    client.force_login(conversation.owner)
    assert client.post(url, {"choice": "both"}).status_code == 400
    assert client.post(url, {"choice": "skip"}, HTTP_HX_REQUEST="true").status_code == 204
    assert client.post(url, {"choice": "skip"}, HTTP_HX_REQUEST="true").status_code == 409
    wait_finished([message])
    assert runs_per_key(tool_server, "ledger_append") == {str(call.key): 1}


def test_a_tool_that_kills_its_worker_every_time_is_named_in_the_dead_letter(
    processes, tool_server
):
    """A crash while a read-only tool runs: it runs again, and kills again; once the message's
    attempts are used up, it is dead-lettered, and the reason names the tool."""
    from continuity.models import DeadLetter

    tool_worker(processes, tool_server, CONTINUITY_FAULT_KILL_AT="tool_call_started")
    processes.add(WatchdogProcess())
    (conversation,) = conversations(1)
    message = send(conversation, tool_trigger("lookup", word="ledger"))

    wait_finished([message])

    assert Message.objects.get(pk=message.pk).state == "dead"
    assert run_states(message) == ["crashed"] * 3
    reason = DeadLetter.objects.get(message=message).reason
    assert "It was running the tool lookup." in reason
    assert not ToolCall.objects.filter(message=message, state="in_doubt").exists()


def test_a_call_that_finds_its_server_down_is_given_back_and_runs_once_it_is_back(
    processes, tool_server, settings, monkeypatch
):
    """The server answered for its tool list, then went away: the call was never sent, so the
    attempt is given back as an interruption (not charged), the call stays pending, and once
    the server is back on its port the call runs, once. A server down when the round begins
    is left out of it, and the model is told."""
    from continuity.delivery.processing import drain_conversation
    from continuity.tools import toolbox

    # The server dies between the round's listing and its call: with no one listening for
    # its changes, the listing outlives it (a listener, seeing its stream end, forgets the
    # list at once, and the round would leave the server out instead: the other test).
    monkeypatch.setattr("continuity.tools.registry.changes_watch", lambda location: None)
    from tests.helpers.factories import ConversationFactory

    settings.CONTINUITY_MCP_SERVERS = [ledger_server(tool_server.url)]
    assert "ledger_append" in toolbox().tools  # listed while it was up, and kept
    tool_server.kill_all()
    conversation = ConversationFactory(brain="faulty")
    message = send(conversation, tool_trigger("ledger_append", entry="rent"))

    drain_conversation(conversation_id=conversation.pk)

    call = ToolCall.objects.get(message=message)
    assert (call.state, call.runs) == ("pending", 0)
    run = Run.objects.get(message=message)
    assert run.state == "interrupted" and run.error.startswith("Tool server unavailable")
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("queued", 0, 1)
    conversation.refresh_from_db()  # it waits a backoff, and the page says what for
    assert conversation.waiting_for == "tool_server" and conversation.retry_at is not None

    back = processes.add(McpServerProcess(ledger=tool_server.ledger, port=tool_server.port))
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)
    drain_conversation(conversation_id=conversation.pk)

    call.refresh_from_db()
    assert (call.state, call.runs) == ("done", 1)
    assert runs_per_key(back, "ledger_append") == {str(call.key): 1}
    assert "Appended 'rent'" in Message.objects.get(reply_to=message).text


def test_a_server_down_when_the_round_begins_is_left_out_and_the_model_told(settings):
    from continuity.tools import toolbox
    from devtools.redis_server import free_port

    settings.CONTINUITY_MCP_SERVERS = [
        {"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp"}
    ]

    box = toolbox()

    assert "ledger_append" not in box.tools and "calculate" in box.tools
    assert "The tool server(s) gone cannot be reached now" in box.note


def test_a_call_whose_answer_never_came_is_in_doubt_at_once_and_shown(
    processes, tool_server, settings, client
):
    """Sent, and no answer within CONTINUITY_TOOL_TIMEOUT: the attempt cannot know whether it
    acted. On its first attempt too, the page shows the call and asks its owner."""
    from continuity.delivery.processing import drain_conversation
    from tests.helpers.factories import ConversationFactory

    settings.CONTINUITY_MCP_SERVERS = [ledger_server(tool_server.url)]
    settings.CONTINUITY_TOOL_TIMEOUT = 1
    conversation = ConversationFactory(brain="faulty")
    message = send(conversation, tool_trigger("ledger_append", entry="rent", first_wait=30))

    drain_conversation(conversation_id=conversation.pk)

    call = ToolCall.objects.get(message=message)
    assert (call.state, call.runs) == ("in_doubt", 1)
    assert runs_per_key(tool_server, "ledger_append") == {str(call.key): 1}
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("queued", 0, 1)
    assert Conversation.objects.get(pk=conversation.pk).state == "deciding"
    client.force_login(conversation.owner)
    page = client.get(f"/c/{conversation.pk}/").content.decode()
    assert f'data-in-doubt="{call.pk}"' in page


def test_staff_may_pause_or_take_over_a_conversation_waiting_for_a_decision():
    from continuity.actions import (
        conversation_hand_back,
        conversation_pause,
        conversation_take_over,
    )
    from tests.helpers.factories import ConversationFactory

    staff = UserFactory(is_staff=True)
    waiting = ConversationFactory(state="deciding")
    conversation_take_over(conversation=waiting, by=staff, reason="I'll sort it out")
    assert Conversation.objects.get(pk=waiting.pk).state == "taken_over"
    conversation_hand_back(conversation=waiting, by=staff, note="")
    assert Conversation.objects.get(pk=waiting.pk).state == "active"  # the next attempt asks

    other = ConversationFactory(state="deciding")
    conversation_pause(conversation=other, reason="Looking into the ledger", by=staff)
    assert Conversation.objects.get(pk=other.pk).state == "paused"


def test_a_safe_call_past_its_tools_time_limit_ends_with_a_timeout_the_model_reads(
    processes, tool_server, settings
):
    """The tool's own limit (its policy), not the default: a read-only call past it is ended,
    not sent again, and the reply goes on with the timeout as its result."""
    from continuity.delivery.processing import drain_conversation
    from tests.helpers.factories import ConversationFactory

    entry = ledger_server(tool_server.url)
    entry["policies"]["wait"] = {"time_limit": 1}
    settings.CONTINUITY_MCP_SERVERS = [entry]
    conversation = ConversationFactory(brain="faulty")
    message = send(conversation, tool_trigger("wait", seconds=20))

    drain_conversation(conversation_id=conversation.pk)

    call = ToolCall.objects.get(message=message)
    assert (call.state, call.runs) == ("error", 1)
    assert call.result.startswith("The tool did not answer within its time limit of 1 s")
    assert "did not answer within its time limit" in Message.objects.get(reply_to=message).text
    assert Message.objects.get(pk=message.pk).state == "done"


def approving_worker(processes, tool_server) -> WorkerProcess:
    servers = ledger_servers_env(tool_server.url, asks_first=True)
    return processes.add(WorkerProcess(CONTINUITY_BRAIN="faulty", CONTINUITY_MCP_SERVERS=servers))


def awaiting(message: Message) -> ToolCall:
    """The call that waits for approval, once its attempt was given back: nothing runs."""
    wait_for(
        lambda: Run.objects.filter(message=message, error__startswith="Waiting for approval"),
        timeout=30,
        what="the attempt to be given back while its call waits for approval",
    )
    return ToolCall.objects.get(message=message, state="awaiting")


def ledger_entries(tool_server) -> Counter:
    return Counter(
        line["arguments"]["entry"]
        for line in ledger_lines(tool_server.ledger)
        if line["tool"] == "ledger_append"
    )


def test_an_approval_outlives_sigkills_of_every_worker_and_the_web_server(processes, tool_server):
    worker = approving_worker(processes, tool_server)
    web = processes.add(WebProcess())
    conversation = ConversationFactory(brain="faulty", owner=UserFactory())
    message = send(conversation, tool_trigger("ledger_append", entry="rent"))
    call = awaiting(message)

    worker.kill_all()
    web.kill_all()
    approving_worker(processes, tool_server)
    web = processes.add(WebProcess())

    browser = SignedInBrowser(web, conversation.owner, f"/c/{conversation.pk}/")
    assert f'data-awaiting="{call.pk}"' in browser.get(f"/c/{conversation.pk}/")
    status, _, _ = browser.post(
        f"/c/{conversation.pk}/tool-calls/{call.pk}/answer/", {"answer": "allow"}
    )
    assert status == 204
    wait_finished([message])

    call.refresh_from_db()
    assert (call.state, call.runs, call.answer) == ("done", 1, "allow")
    assert ledger_entries(tool_server) == {"rent": 1}
    assert runs_per_key(tool_server, "ledger_append") == {str(call.key): 1}
    assert "Appended 'rent'" in Message.objects.get(reply_to=message).text
    assert_promise_kept([message])


def test_a_deadline_passed_while_no_worker_ran_is_denied_once_when_one_returns(
    processes, tool_server
):
    servers = ledger_servers_env(tool_server.url, asks_first=True)
    env = {"CONTINUITY_APPROVAL_SECONDS": "3"}
    worker = processes.add(
        WorkerProcess(CONTINUITY_BRAIN="faulty", CONTINUITY_MCP_SERVERS=servers, **env)
    )
    conversation = ConversationFactory(brain="faulty")
    message = send(conversation, tool_trigger("ledger_append", entry="rent"))
    call = awaiting(message)
    worker.kill_all()
    wait_for(
        lambda: ToolCall.objects.filter(pk=call.pk, approval_due_at__lt=database_now()).exists(),
        timeout=10,
        what="the deadline to pass",
        every=0.2,
    )
    assert ToolCall.objects.get(pk=call.pk).state == "awaiting"  # nobody swept meanwhile

    processes.add(WorkerProcess(CONTINUITY_BRAIN="faulty", CONTINUITY_MCP_SERVERS=servers, **env))
    wait_finished([message])

    call.refresh_from_db()
    assert (call.state, call.answer, call.runs) == ("expired", "timed_out", 0)
    assert "Not approved in time" in Message.objects.get(reply_to=message).text
    assert ledger_entries(tool_server) == {}
    assert_promise_kept([message])


def test_a_new_message_sent_while_an_approval_waits_is_answered_and_denies_it(
    processes, tool_server
):
    approving_worker(processes, tool_server)
    web = processes.add(WebProcess())
    conversation = ConversationFactory(brain="faulty", owner=UserFactory())
    message = send(conversation, tool_trigger("ledger_append", entry="rent"))
    call = awaiting(message)
    browser = SignedInBrowser(web, conversation.owner, f"/c/{conversation.pk}/")

    status, _, _ = browser.post(
        f"/c/{conversation.pk}/messages/",
        {"text": "Never mind, what is 2 + 2?", "client_id": str(uuid.uuid4())},
    )

    assert status == 200  # accepted: never a 409 while something waits for approval
    later = Message.objects.get(conversation=conversation, text="Never mind, what is 2 + 2?")
    wait_finished([message, later])
    call.refresh_from_db()
    assert (call.state, call.answer) == ("denied", "moved_on")
    assert "the person moved on" in Message.objects.get(reply_to=message).text
    assert ledger_entries(tool_server) == {}
    assert_promise_kept([message, later])


def test_a_long_call_keeps_its_attempt_alive_past_the_heartbeat_ttl(processes, tool_server):
    """Eight seconds in one call, several heartbeat TTLs: the attempt still beats, so the
    watchdog reaps nothing, and the call runs once."""
    from continuity.models import CrashRecord

    tool_worker(processes, tool_server)
    processes.add(WatchdogProcess())
    conversation = ConversationFactory(brain="faulty")
    message = send(conversation, tool_trigger("wait", seconds=8))

    wait_finished([message], timeout=60)

    call = ToolCall.objects.get(message=message)
    assert (call.state, call.runs, call.result) == ("done", 1, "Waited 8 s.")
    assert run_states(message) == ["completed"]
    assert not CrashRecord.objects.exists()
    assert runs_per_key(tool_server, "wait") == {str(call.key): 1}
