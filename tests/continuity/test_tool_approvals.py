"""Tool calls that wait for their owner's approval, answered in this process against the real
MCP test server: waiting is a row (no attempt runs meanwhile), every answer is fenced, each
parallel call has its own, and nothing locks the conversation (a new message, Stop or the
deadline denies what waits, and the conversation goes on)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.core.exceptions import PermissionDenied

from continuity.actions import conversation_take_over, tool_call_answer, tool_calls_stop
from continuity.database.clock import database_now
from continuity.delivery import watchdog_tick
from continuity.delivery.processing import drain_conversation
from continuity.models import (
    Conversation,
    McpServer,
    Message,
    Run,
    ToolAllowance,
    ToolCall,
    ToolPolicy,
)
from continuity.tools import toolbox
from devtools.mcp_server import ledger_lines
from tests.helpers.brains import tool_trigger
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send
from tests.helpers.processes import McpServerProcess
from tests.helpers.tool_servers import ledger_server

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tool_server(processes, settings):
    server = processes.add(McpServerProcess())
    settings.CONTINUITY_MCP_SERVERS = [ledger_server(server.url, asks_first=True)]
    return server


@pytest.fixture
def conversation():
    return ConversationFactory(brain="faulty")


def ledger(tool_server) -> Counter:
    lines = ledger_lines(tool_server.ledger)
    return Counter(line["arguments"]["entry"] for line in lines if line["tool"] == "ledger_append")


def awaiting_after(conversation, text: str) -> tuple[Message, list[ToolCall]]:
    message = send(conversation, text)
    drain_conversation(conversation_id=conversation.pk)
    return message, list(ToolCall.objects.filter(message=message).order_by("position"))


def reply_to(message: Message) -> str:
    return Message.objects.get(reply_to=message).text


def test_a_destructive_call_waits_as_a_row_and_allow_runs_it_once(tool_server, conversation):
    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))

    assert (call.state, call.runs, call.answer) == ("awaiting", 0, "")
    assert ledger(tool_server) == {}
    run = Run.objects.get(message=message)  # no attempt is held while it waits
    assert run.state == "interrupted" and run.error.startswith("Waiting for approval")
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("queued", 0, 0)
    conversation.refresh_from_db()
    assert conversation.waiting_for == "approval"
    assert conversation.retry_at == call.approval_due_at

    assert tool_call_answer(call=call, answer="allow", by=conversation.owner)
    conversation.refresh_from_db()
    assert conversation.retry_at is None and conversation.waiting_for == ""
    drain_conversation(conversation_id=conversation.pk)

    call.refresh_from_db()
    assert (call.state, call.runs, call.answer) == ("done", 1, "allow")
    assert call.answered_by == conversation.owner
    assert ledger(tool_server) == {"rent": 1}
    assert "Appended 'rent'" in reply_to(message)


def test_a_second_answer_changes_nothing_and_says_so(tool_server, conversation, client):
    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    client.force_login(conversation.owner)
    url = f"/c/{conversation.pk}/tool-calls/{call.pk}/answer/"

    first = client.post(url, {"answer": "deny"}, headers={"HX-Request": "true"})
    again = client.post(url, {"answer": "allow"}, headers={"HX-Request": "true"})

    assert first.status_code == 204
    assert again.status_code == 409
    assert again.content.decode() == "This call was already answered: denied."
    call.refresh_from_db()
    assert (call.state, call.answer) == ("denied", "deny")
    drain_conversation(conversation_id=conversation.pk)
    assert ledger(tool_server) == {}
    assert "The person denied this call: it was not run." in reply_to(message)


def test_bad_answers_and_other_peoples_calls_are_refused(tool_server, conversation, client):
    _, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    url = f"/c/{conversation.pk}/tool-calls/{call.pk}/answer/"
    client.force_login(UserFactory())
    assert client.post(url, {"answer": "allow"}).status_code == 404
    client.force_login(conversation.owner)
    assert client.post(url, {"answer": "maybe"}).status_code == 400
    assert client.post(f"/c/{conversation.pk}/tool-calls/999999/answer/").status_code == 404
    assert ToolCall.objects.get(pk=call.pk).state == "awaiting"


@pytest.mark.parametrize("first", ["rent", "gas"])
def test_parallel_calls_each_have_their_own_approval(tool_server, conversation, first):
    text = tool_trigger("ledger_append", entry="rent") + tool_trigger("ledger_append", entry="gas")
    message, calls = awaiting_after(conversation, text)
    by_entry = {call.arguments["entry"]: call for call in calls}
    assert [call.state for call in calls] == ["awaiting", "awaiting"]
    answers = {"rent": "deny", "gas": "allow"}
    second = "gas" if first == "rent" else "rent"

    assert tool_call_answer(call=by_entry[first], answer=answers[first], by=conversation.owner)
    # One still waits: no attempt goes on yet.
    assert Conversation.objects.get(pk=conversation.pk).waiting_for == "approval"
    assert tool_call_answer(call=by_entry[second], answer=answers[second], by=conversation.owner)
    drain_conversation(conversation_id=conversation.pk)

    states = dict(ToolCall.objects.filter(message=message).values_list("arguments__entry", "state"))
    assert states == {"rent": "denied", "gas": "done"}
    assert ledger(tool_server) == {"gas": 1}


def test_a_new_message_denies_what_waits_and_both_are_answered(tool_server, conversation):
    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))

    later = send(conversation, "Never mind, what is 2 + 2?")

    call.refresh_from_db()
    assert (call.state, call.answer) == ("denied", "moved_on")
    assert Conversation.objects.get(pk=conversation.pk).retry_at is None
    drain_conversation(conversation_id=conversation.pk)
    assert "the person moved on" in reply_to(message)
    assert Message.objects.get(pk=later.pk).state == "done"
    assert ledger(tool_server) == {}


def test_stop_denies_what_waits(tool_server, conversation, client):
    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    client.force_login(conversation.owner)

    stopped = client.post(
        f"/c/{conversation.pk}/messages/{message.pk}/stop/", headers={"HX-Request": "true"}
    )

    assert stopped.status_code == 204
    call.refresh_from_db()
    assert (call.state, call.answer) == ("denied", "stopped")
    assert tool_calls_stop(message=message) == 0  # nothing waits any more


def test_the_deadline_denies_it_once_at_the_sweep(tool_server, conversation):
    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    watchdog_tick()
    assert ToolCall.objects.get(pk=call.pk).state == "awaiting"  # not due yet: nothing denied

    ToolCall.objects.filter(pk=call.pk).update(approval_due_at=database_now())
    watchdog_tick()
    watchdog_tick()

    call.refresh_from_db()
    assert (call.state, call.answer) == ("expired", "timed_out")
    assert not tool_call_answer(call=call, answer="allow", by=conversation.owner)
    drain_conversation(conversation_id=conversation.pk)
    assert "Not approved in time" in reply_to(message)
    assert ledger(tool_server) == {}


def test_a_message_sent_as_the_question_was_recorded_denies_it(
    tool_server, conversation, monkeypatch
):
    """The round's calls committed, and the person wrote before the attempt was given back:
    the calls are denied as moved on then, not left waiting until their deadline."""
    from continuity.delivery import toolcalls

    later: list[Message] = []
    given_back = toolcalls.calls_await

    def written_meanwhile(**kwargs):
        later.append(send(conversation, "Never mind"))
        given_back(**kwargs)

    monkeypatch.setattr(toolcalls, "calls_await", written_meanwhile)
    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))

    call.refresh_from_db()
    assert (call.state, call.answer) == ("denied", "moved_on")
    assert Conversation.objects.get(pk=conversation.pk).retry_at is None
    drain_conversation(conversation_id=conversation.pk)
    assert "the person moved on" in reply_to(message)
    assert Message.objects.get(pk=later[0].pk).state == "done"


def test_stop_as_the_question_was_recorded_denies_it(tool_server, conversation, monkeypatch):
    from continuity.actions import reply_stop
    from continuity.delivery import toolcalls

    given_back = toolcalls.calls_await

    def stopped_meanwhile(*, run, calls):
        reply_stop(message=Message.objects.get(pk=run.message_id))
        given_back(run=run, calls=calls)

    monkeypatch.setattr(toolcalls, "calls_await", stopped_meanwhile)
    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))

    call.refresh_from_db()
    assert (call.state, call.answer) == ("denied", "stopped")
    assert Message.objects.get(pk=message.pk).state == "done"
    conversation.refresh_from_db()
    assert conversation.retry_at is None and conversation.waiting_for == ""


def test_supports_reply_denies_what_its_question_waited_for(tool_server, conversation):
    from continuity.actions import staff_reply

    message, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    staff = UserFactory(is_staff=True)
    conversation_take_over(conversation=conversation, by=staff, reason="helping")

    staff_reply(conversation=conversation, by=staff, text="Done by hand.", answering=message.pk)

    call.refresh_from_db()
    assert (call.state, call.answer) == ("denied", "support_answered")
    assert Conversation.objects.get(pk=conversation.pk).waiting_for == ""
    assert ledger(tool_server) == {}


def test_allow_for_this_conversation_lets_later_calls_run_without_asking(tool_server, conversation):
    _, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    assert tool_call_answer(call=call, answer="allow_conversation", by=conversation.owner)
    drain_conversation(conversation_id=conversation.pk)
    assert ToolAllowance.objects.filter(conversation=conversation, tool="ledger_append").exists()

    _, [later] = awaiting_after(conversation, tool_trigger("ledger_append", entry="gas"))

    assert (later.state, later.answer) == ("done", "")
    assert ledger(tool_server) == {"rent": 1, "gas": 1}
    other = ConversationFactory(owner=conversation.owner, brain="faulty")
    _, [elsewhere] = awaiting_after(other, tool_trigger("ledger_append", entry="tax"))
    assert elsewhere.state == "awaiting"  # allowed in that conversation only


def test_staff_answer_only_for_a_conversation_they_took_over(tool_server, conversation):
    _, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    staff = UserFactory(is_staff=True)

    with pytest.raises(PermissionDenied):
        tool_call_answer(call=call, answer="allow", by=staff)
    conversation_take_over(conversation=conversation, by=staff, reason="helping")

    assert tool_call_answer(call=call, answer="allow", by=staff)
    assert ToolCall.objects.get(pk=call.pk).answered_by == staff


def test_the_admins_policy_says_which_tools_ask(tool_server, settings):
    server = McpServer.objects.create(name="ledger", url=tool_server.url)
    box = toolbox()
    assert box.tools["ledger_append"].asks_first  # unannotated: destructive by MCP's defaults
    assert not box.tools["set_value"].asks_first  # idempotent, not destructive
    assert not box.tools["lookup"].asks_first and not box.tools["remember"].asks_first

    ToolPolicy.objects.create(server=server, tool="ledger_append", approval="never")
    ToolPolicy.objects.create(server=server, tool="set_value", approval="always", time_limit=7)
    box = toolbox()

    assert not box.tools["ledger_append"].asks_first
    assert box.tools["set_value"].asks_first and box.tools["set_value"].time_limit == 7
    assert box.tools["lookup"].time_limit == settings.CONTINUITY_TOOL_TIMEOUT


def test_staff_answer_from_the_console_once_they_took_it_over(tool_server, conversation, client):
    _, [call] = awaiting_after(conversation, tool_trigger("ledger_append", entry="rent"))
    staff = UserFactory(is_staff=True)
    client.force_login(staff)
    url = f"/dashboard/conversations/{conversation.pk}/tool-calls/{call.pk}/answer/"
    page = f"/dashboard/conversations/{conversation.pk}/"

    assert client.post(url, {"answer": "allow"}).status_code == 403
    conversation_take_over(conversation=conversation, by=staff, reason="helping")
    assert f'data-staff-approval="{call.pk}"' in client.get(page).content.decode()

    assert client.post(url, {"answer": "deny"}).status_code == 302
    call.refresh_from_db()
    assert (call.state, call.answer, call.answered_by) == ("denied", "deny", staff)
