"""Two scopes: what a person says about themselves is theirs, in every conversation (memory
facts); a goal, its plan and the notes about it are the conversation's (its handoff). A reply's
end merges only what its exchange changed into the newest handoff, so a correction or a staff
edit made while it was written stays; forgetting a fact takes it out of every note and summary
it was copied to."""

from __future__ import annotations

import json

import pytest

from chat.brains.builtin import BuiltinBrain
from continuity.context.assembly import run_context_text
from continuity.context.compaction import summary_write
from continuity.context.handoffs import handoff_correct, handoff_latest, handoff_write
from continuity.context.memory import memory_fact_forget
from continuity.delivery.processing import drain_conversation
from continuity.models import Handoff, MemoryFact, Message, RunContext, Summary
from devtools.fake_model import FakeOpenAI
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


def answer(conversation, text: str) -> str:
    message = send(conversation, text)
    drain_conversation(conversation_id=conversation.pk)
    return Message.objects.get(reply_to=message).text


def test_where_were_we_speaks_only_of_this_conversations_goal(user):
    bread = ConversationFactory(owner=user)
    spanish = ConversationFactory(owner=user)
    answer(bread, "My goal is to bake Sourdough bread")
    answer(spanish, "My goal is to learn Spanish")

    recap = answer(bread, "Where were we?")

    assert "Your goal in this conversation: **bake Sourdough bread**." in recap  # its casing
    assert "Spanish" not in recap
    assert recap.count("Next step") == 1
    assert recap.endswith("Next step: Say what “bake Sourdough bread” looks like when it is done.")
    assert not MemoryFact.objects.filter(key="goal").exists()  # no goal is the person's
    assert "learn Spanish" in answer(spanish, "What is my goal?")


def test_a_correction_made_while_a_reply_is_written_is_in_the_next_reply(conversation, monkeypatch):
    answer(conversation, "My goal is to bake sourdough bread")
    streamed = BuiltinBrain.respond

    def correcting_mid_reply(self, context, plan, work):
        for index, token in enumerate(streamed(self, context, plan, work)):
            if index == 2 and "rye" in context.text:
                handoff_correct(
                    conversation_id=conversation.pk,
                    text="My deadline moved to Monday",
                    author=conversation.owner,
                )
            yield token

    monkeypatch.setattr(BuiltinBrain, "respond", correcting_mid_reply)
    # This exchange changes the goal, so it writes the handoff at its end, after the correction.
    answer(conversation, "My goal is to bake rye bread")

    latest = handoff_latest(conversation_id=conversation.pk)
    assert latest.reason == Handoff.Reason.AFTER_REPLY
    assert "Correction from the user: My deadline moved to Monday" in latest.critical_context
    assert latest.current_state.splitlines()[0] == "Working on: bake rye bread"
    recap = answer(conversation, "Where were we?")
    assert "- Correction from the user: My deadline moved to Monday" in recap


def test_a_staff_line_added_while_a_reply_is_written_is_kept_and_recalled(
    conversation, monkeypatch
):
    answer(conversation, "My goal is to bake sourdough bread")
    streamed = BuiltinBrain.respond

    def staff_edit_mid_reply(self, context, plan, work):
        for index, token in enumerate(streamed(self, context, plan, work)):
            if index == 2 and "rye" in context.text:
                latest = handoff_latest(conversation_id=conversation.pk)
                handoff_write(
                    conversation_id=conversation.pk,
                    reason=Handoff.Reason.STAFF_EDIT,
                    sections={
                        "current_state": latest.current_state,
                        "critical_context": "The oven runs 10 degrees hot",
                        "next_steps": latest.next_steps,
                        "decisions": latest.decisions,
                    },
                )
            yield token

    monkeypatch.setattr(BuiltinBrain, "respond", staff_edit_mid_reply)
    answer(conversation, "My goal is to bake rye bread")

    latest = handoff_latest(conversation_id=conversation.pk)
    assert latest.critical_context == "The oven runs 10 degrees hot"
    recap = answer(conversation, "Where were we?")
    assert "Your goal in this conversation: **bake rye bread**." in recap
    assert "- The oven runs 10 degrees hot" in recap


def test_forgetting_a_fact_takes_it_out_of_every_note_and_summary(user):
    chat = ConversationFactory(owner=user)
    other = ConversationFactory(owner=user)
    answer(chat, "My name is Ada Quill")
    # Copies written before facts had a scope of their own, and an extractive summary.
    for conversation in (chat, other):
        handoff_write(
            conversation_id=conversation.pk,
            reason=Handoff.Reason.AFTER_REPLY,
            sections={"critical_context": "name: Ada Quill\nThe oven runs hot"},
        )
    first = chat.messages.order_by("pk").first()
    summary_write(
        conversation_id=chat.pk,
        covers_through_id=first.pk,
        text="- You said: “My name is Ada Quill”\n- You said: “I like rye”",
    )

    memory_fact_forget(fact=MemoryFact.objects.get(owner=user, key="name"))

    for conversation in (chat, other):
        latest = handoff_latest(conversation_id=conversation.pk)
        assert (latest.reason, latest.critical_context) == ("forgotten", "The oven runs hot")
    summary = Summary.objects.filter(conversation=chat).order_by("-version").first()
    assert summary.text == "- You said: “I like rye”"
    question = send(other, "What is my name?")
    drain_conversation(conversation_id=other.pk)
    assert "Ada" not in run_context_text(RunContext.objects.get(run__message=question))
    assert "haven't told me your name" in Message.objects.get(reply_to=question).text


# Real commits: a model server's probes can take past a heartbeat, and the heartbeat's own
# connection must see the attempt's run, or it ends the attempt as if the run were ended elsewhere.
@pytest.mark.django_db(transaction=True)
def test_a_forgotten_fact_is_in_no_later_prompt_a_model_is_sent(user, settings):
    fake = FakeOpenAI(delay=0).start()
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    chat = ConversationFactory(owner=user, brain="openai")
    other = ConversationFactory(owner=user, brain="openai")
    try:
        answer(chat, "My name is Ada Quill and my goal is to bake bread")
        handoff_write(  # a copy the old code made in another conversation's notes
            conversation_id=other.pk,
            reason=Handoff.Reason.AFTER_REPLY,
            sections={"critical_context": "name: Ada Quill"},
        )
        answer(other, "Hello")
        assert "Ada Quill" in json.dumps(fake.streamed()[-1]["messages"])

        memory_fact_forget(fact=MemoryFact.objects.get(owner=user, key="name"))
        answer(other, "What is my name?")
    finally:
        fake.stop()

    asked = json.dumps(fake.streamed()[-1]["messages"], ensure_ascii=False)
    assert "What is my name?" in asked and "Ada" not in asked
    # The goal is the conversation's: in its own prompt, not in the other's.
    assert "bake bread" not in asked


def test_forgetting_finds_values_that_are_not_plain_words(user):
    from continuity.context.memory import memory_remember

    chat = ConversationFactory(owner=user)
    fact = memory_remember(owner_id=user.pk, key="likes", value="C++")
    handoff_write(
        conversation_id=chat.pk,
        reason=Handoff.Reason.AFTER_REPLY,
        sections={"critical_context": "likes: C++\nlikes: C sharp"},
    )
    memory_fact_forget(fact=fact)
    assert handoff_latest(conversation_id=chat.pk).critical_context == "likes: C sharp"
