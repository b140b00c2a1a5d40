"""A reply in rounds with the built-in tools, in this process: each call recorded before it
runs, its result read by the next round, a completed call never run again, and a call that a
crash left running either run again (a tool safe to rerun) or held in doubt for its owner."""

from __future__ import annotations

import pytest

from continuity.brains import ToolUse
from continuity.delivery.processing import drain_conversation
from continuity.models import Checkpoint, Conversation, MemoryFact, Message, Run, ToolCall
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


def answer(conversation, text: str) -> Message:
    message = send(conversation, text)
    drain_conversation(conversation_id=conversation.pk)
    return Message.objects.get(reply_to=message)


def test_remember_that_is_a_recorded_tool_call_whose_result_the_reply_reads(conversation):
    reply = answer(conversation, "Remember that I like tea")

    call = ToolCall.objects.get()
    assert (call.tool, call.source, call.state, call.runs) == ("remember", "built-in", "done", 1)
    assert call.arguments == {"fact": "you like tea"}
    assert call.round == 1 and call.message_id == reply.reply_to_id
    assert reply.text == "I'll remember that you like tea."
    assert MemoryFact.objects.current().get(owner=conversation.owner, key="note").value == (
        "you like tea"
    )
    steps = set(Checkpoint.objects.filter(message=reply.reply_to).values_list("step", flat=True))
    assert steps == {"plan", "round-1", "respond", "remember"}


def test_a_calculation_and_a_search_answer_from_their_tools(user):
    first = ConversationFactory(owner=user)
    answer(first, "My train to Lyon leaves at noon")
    other = ConversationFactory(owner=user)

    assert answer(other, "What is 17 × 23?").text == "17 × 23 = 391."
    found = answer(other, "What did I say about Lyon in my other chats?").text
    assert "My train to Lyon leaves at noon" in found
    assert list(ToolCall.objects.values_list("tool", "state")) == [
        ("calculate", "done"),
        ("search_conversations", "done"),
    ]


def test_a_search_never_reads_another_persons_conversations(user, other_user):
    answer(ConversationFactory(owner=other_user), "My secret plan is the Lyon heist")
    mine = ConversationFactory(owner=user)

    found = answer(mine, "What did I say about Lyon?").text

    assert "heist" not in found
    assert "Nothing you said in your conversations mentions “Lyon”" in found


def test_a_tools_own_error_goes_back_to_the_model_and_the_reply_goes_on(conversation):
    reply = answer(conversation, "What is 1 / 0 + 2?")

    call = ToolCall.objects.get()
    assert call.state == "error"
    assert "Cannot calculate" in call.result
    assert reply.reply_to.state == "done"
    assert Run.objects.get().state == "completed"


@pytest.mark.django_db(transaction=True)  # a failed attempt is recorded on a fresh connection
def test_a_completed_round_and_its_calls_are_reused_after_a_crash(conversation, monkeypatch):
    """Killed between the rounds: the next attempt neither asks the model for the first round
    again nor runs its call again."""
    from chat.brains.builtin import BuiltinBrain

    respond = BuiltinBrain.respond
    crashed = []

    def crash_in_the_second_round(self, context, plan, work=None):
        if work and work.rounds and not crashed:
            crashed.append(True)
            raise RuntimeError("the worker died here")
        return (yield from respond(self, context, plan, work))

    monkeypatch.setattr(BuiltinBrain, "respond", crash_in_the_second_round)
    message = send(conversation, "Remember that I like tea")
    drain_conversation(conversation_id=conversation.pk)
    assert Run.objects.get().state == "failed"
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)

    drain_conversation(conversation_id=conversation.pk)

    assert Message.objects.get(reply_to=message).text == "I'll remember that you like tea."
    call = ToolCall.objects.get()
    assert (call.state, call.runs, call.run_id) == ("done", 1, Run.objects.first().pk)


def test_a_call_a_crash_left_running_is_held_in_doubt_and_not_run_again(conversation):
    """A tool that is neither read-only nor idempotent, found running: in doubt, the attempt
    given back uncharged, and the conversation waits for its owner."""
    message = send(conversation, "Remember that I like tea")
    drain_conversation(conversation_id=conversation.pk)
    call = ToolCall.objects.get()
    # As a crash mid-call would have left it: a tool of unknown effect, running.
    Message.objects.filter(reply_to=message).delete()
    Checkpoint.objects.filter(message=message, step__in=["respond", "remember"]).delete()
    Message.objects.filter(pk=message.pk).update(state="queued")
    ToolCall.objects.filter(pk=call.pk).update(state="running", runs_again_safely=False)

    drain_conversation(conversation_id=conversation.pk)

    call.refresh_from_db()
    message.refresh_from_db()
    conversation.refresh_from_db()
    assert (call.state, call.runs) == ("in_doubt", 1)
    assert conversation.state == Conversation.State.DECIDING
    assert (message.state, message.attempts) == ("queued", 1)
    assert Run.objects.order_by("id").last().error.startswith("Tool call in doubt")
    assert not Message.objects.filter(reply_to=message).exists()


def test_a_model_that_asks_for_an_unknown_tool_reads_why(conversation, monkeypatch):
    from chat.brains.builtin import BuiltinBrain

    def ask_for_a_tool_that_is_not_there(self, context, plan, work=None):
        if not work.rounds:
            return [ToolUse("c1", "launch_rockets", {"count": 3})]
        yield f"Result: {work.rounds[0].results['c1']}"
        return None

    monkeypatch.setattr(BuiltinBrain, "respond", ask_for_a_tool_that_is_not_there)

    reply = answer(conversation, "hello")

    assert reply.text == "Result: There is no tool named 'launch_rockets' in this reply."
    assert ToolCall.objects.get().state == "error"


def test_past_the_rounds_limit_the_model_is_asked_to_answer_without_tools(
    conversation, monkeypatch, settings
):
    from chat.brains.builtin import BuiltinBrain

    settings.CONTINUITY_TOOL_ROUNDS = 2
    seen = []

    def always_another_call(self, context, plan, work=None):
        seen.append((len(work.rounds), bool(work.tools), work.note))
        if work.tools:
            return [ToolUse("c", "calculate", {"expression": "1 + 1"})]
        yield "Enough."
        return None

    monkeypatch.setattr(BuiltinBrain, "respond", always_another_call)

    assert answer(conversation, "hello").text == "Enough."
    assert [(rounds, offered) for rounds, offered, _ in seen] == [(0, True), (1, True), (2, False)]
    assert "No more tool calls" in seen[-1][2]
    assert ToolCall.objects.count() == 2


def test_forget_forgets_one_fact_it_is_sure_of_and_never_guesses(conversation):
    from continuity.context.memory import memory_remember

    owner = conversation.owner.pk
    memory_remember(owner_id=owner, key="likes", value="British tea")
    memory_remember(owner_id=owner, key="city", value="Lyon, a British town? no")

    vague = answer(conversation, "Forget it")
    several = answer(conversation, "Forget British")
    sure = answer(conversation, "Forget likes")

    assert "Say which fact to forget" in ToolCall.objects.get(message=vague.reply_to).result
    assert "Several facts match" in ToolCall.objects.get(message=several.reply_to).result
    assert sure.text == "Forgot likes: British tea."
    assert list(
        MemoryFact.objects.current().filter(owner_id=owner).values_list("key", flat=True)
    ) == ["city"]
