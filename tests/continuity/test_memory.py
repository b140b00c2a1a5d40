"""Forgetting a fact: what the person asked to be gone stays gone from every note, summary,
context and prompt written afterwards, and only what came from the fact goes."""

from __future__ import annotations

import json

import pytest
from django.db.models import Max

from chat.brains.builtin import BuiltinBrain
from continuity.context.assembly import run_context_text
from continuity.context.handoffs import handoff_latest, handoff_write
from continuity.context.memory import memory_fact_forget
from continuity.delivery.processing import drain_conversation
from continuity.models import Handoff, MemoryFact, Message, RunContext, Summary
from devtools.fake_model import FakeOpenAI
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send


def answer(conversation, text: str) -> str:
    message = send(conversation, text)
    drain_conversation(conversation_id=conversation.pk)
    return Message.objects.get(reply_to=message).text


def newest_id(model) -> int:
    return model.objects.aggregate(newest=Max("id"))["newest"] or 0


def written_after(model, newest: int, **filters):
    return model.objects.filter(pk__gt=newest, **filters)


# Real commits for the model brain: a model server's probes can take past a heartbeat, and the
# heartbeat's own connection must see the attempt's run.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("brain", ["builtin", "openai"])
def test_a_forgotten_fact_is_in_nothing_written_afterwards(user, settings, brain):
    settings.CONTINUITY_HISTORY_EXCHANGES = 2
    settings.CONTINUITY_CONTEXT_TOKENS = 120
    fake = FakeOpenAI(delay=0).start()
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    chat = ConversationFactory(owner=user, brain=brain)
    try:
        answer(chat, "My name is Ada Quill.")
        memory_fact_forget(fact=MemoryFact.objects.get(owner=user, key="name"))
        summaries, handoffs, contexts = (newest_id(m) for m in (Summary, Handoff, RunContext))
        prompts = len(fake.streamed())
        for number in range(1, 7):
            answer(chat, f"My goal is to bake {number} loaves. I like rye number {number}.")
    finally:
        fake.stop()

    later_summaries = written_after(Summary, summaries, conversation=chat)
    assert later_summaries.count() >= 2  # several compactions, each from the one before
    for summary in later_summaries:
        assert "Ada" not in summary.text
    for handoff in written_after(Handoff, handoffs, conversation=chat):
        assert "Ada" not in " ".join(getattr(handoff, name) for name in Handoff.SECTIONS)
    later_contexts = written_after(RunContext, contexts, run__conversation=chat)
    assert later_contexts.count() == 6
    for stored in later_contexts:
        assert "Ada" not in run_context_text(stored)
    if brain == "openai":
        later_prompts = fake.streamed()[prompts:]
        assert len(later_prompts) >= 6
        assert all("Ada" not in json.dumps(body, ensure_ascii=False) for body in later_prompts)
    # The page still shows what the person wrote: forgetting is the agent's, not the history's.
    assert chat.messages.filter(text="My name is Ada Quill.").exists()


@pytest.mark.django_db
def test_forgetting_a_like_keeps_another_conversations_goal_that_uses_the_word(user):
    lisbon = ConversationFactory(owner=user)
    trip = ConversationFactory(owner=user)
    answer(lisbon, "I like Lisbon.")
    answer(trip, "My goal is to plan a week in Lisbon with my parents")
    before = handoff_latest(conversation_id=trip.pk)

    memory_fact_forget(fact=MemoryFact.objects.get(owner=user, key="likes"))

    after = handoff_latest(conversation_id=trip.pk)
    assert after.current_state == before.current_state
    assert "plan a week in Lisbon with my parents" in after.current_state
    assert after.next_steps == before.next_steps
    assert after.decisions == before.decisions
    assert "Lisbon" in answer(trip, "Where were we?")


@pytest.mark.django_db
def test_forgetting_removes_the_facts_lines_and_its_stated_sentence_only(user):
    lisbon = ConversationFactory(owner=user)
    trip = ConversationFactory(owner=user)
    answer(lisbon, "I like Lisbon. My goal is to see Lisbon's trams")
    for conversation in (lisbon, trip):
        handoff_write(  # copies an earlier release made of the fact, and the trip's own plan
            conversation_id=conversation.pk,
            reason=Handoff.Reason.AFTER_REPLY,
            sections={
                "current_state": "Working on: a week in Lisbon",
                "critical_context": "likes: Lisbon\nYou said: “I like Lisbon.”\nFlights to Lisbon",
            },
        )

    memory_fact_forget(fact=MemoryFact.objects.get(owner=user, key="likes"))

    for conversation in (lisbon, trip):
        latest = handoff_latest(conversation_id=conversation.pk)
        assert latest.reason == Handoff.Reason.FORGOTTEN
        assert latest.current_state == "Working on: a week in Lisbon"
        assert latest.critical_context == "Flights to Lisbon"


@pytest.mark.django_db
def test_a_forget_during_a_compaction_keeps_the_fact_out_of_its_summary(
    user, settings, monkeypatch
):
    settings.CONTINUITY_HISTORY_EXCHANGES = 1
    settings.CONTINUITY_CONTEXT_TOKENS = 200
    chat = ConversationFactory(owner=user)
    answer(chat, "My name is Ada Quill.")
    summarized = BuiltinBrain.summarize

    def forgotten_meanwhile(self, turns, previous_summary):
        if MemoryFact.objects.filter(owner=user, key="name").exists():
            memory_fact_forget(fact=MemoryFact.objects.get(owner=user, key="name"))
        return summarized(self, turns, previous_summary)

    monkeypatch.setattr(BuiltinBrain, "summarize", forgotten_meanwhile)
    for number in range(1, 4):
        answer(chat, f"I like rye number {number}. Remember that batch {number} rose well.")

    assert not MemoryFact.objects.filter(owner=user, key="name").exists()
    assert Summary.objects.filter(conversation=chat).exists()
    for summary in Summary.objects.filter(conversation=chat):
        assert "Ada" not in summary.text
