"""The built-in brain's notes: said back in the second person, and never taken from a question."""

from __future__ import annotations

import pytest

from chat.brains.builtin import BuiltinBrain, reflect
from continuity.brains import Context


def context(text: str, facts: dict | None = None) -> Context:
    return Context(
        owner_id=1,
        conversation_id=1,
        message_id=1,
        attempt=1,
        text=text,
        history=[],
        facts=facts or {},
    )


def answer(text: str, facts: dict | None = None) -> tuple[str, dict]:
    brain = BuiltinBrain()
    ctx = context(text, facts)
    plan = brain.plan(ctx)
    reply = "".join(brain.respond(ctx, plan))
    return reply, brain.remember(ctx, plan, reply)


def test_a_note_about_me_is_said_back_about_you():
    reply, facts = answer("Please remember that my knee hurts")
    assert reply == "I'll remember that your knee hurts."
    assert facts == {"note": "your knee hurts"}


def test_what_do_you_remember_about_me_stores_no_note():
    reply, facts = answer("What do you remember about me?", facts={"name": "Ada"})
    assert facts == {}
    assert reply == "About you (I remember it in all your conversations):\n\n- Your name is Ada."
    assert "about me" not in reply


def test_do_you_remember_my_name_is_a_question_not_a_note():
    _, facts = answer("Do you remember my name?")
    assert "note" not in facts


@pytest.mark.parametrize(
    ("said", "reflected"),
    [
        ("my knee hurts", "your knee hurts"),
        ("I'm allergic to nuts", "you're allergic to nuts"),
        ("I am tired", "you are tired"),
        ("the blue mug is mine, not Tim's", "the blue mug is yours, not Tim's"),
        ("I told myself to call me back", "you told yourself to call you back"),
        ("I’ve moved", "you've moved"),
        ("My sister visits", "your sister visits"),
        ("enemy time in Miami", "enemy time in Miami"),
    ],
)
def test_reflect_swaps_whole_words_only(said, reflected):
    assert reflect(said) == reflected


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Hi! My goal is to ship the compiler", "Ship the compiler"),
        (
            "hello, can you explain monads to me in simple words please? thanks",
            "Can you explain monads to me in simple…",
        ),
        ("What is Rust? Tell me more.", "What is Rust?"),
        ("hi", "hi"),
    ],
)
def test_titles(text, title):
    from continuity.brains import Context

    assert (
        BuiltinBrain().title(
            Context(owner_id=1, conversation_id=1, message_id=1, attempt=1, text=text), ""
        )
        == title
    )


@pytest.mark.parametrize(
    "text",
    ["I'm Tired of this bug", "I am Sure it broke", "i'm Stuck"],
)
def test_a_name_is_learnt_only_when_it_is_said_to_be_one(text):
    reply, facts = answer(text)
    assert "name" not in facts and "Nice to meet you" not in reply


@pytest.mark.parametrize(
    ("text", "name"),
    [("My name is Ada Quill", "Ada Quill"), ("call me deShawn", "DeShawn")],
)
def test_a_name_said_to_be_one_keeps_its_casing(text, name):
    assert answer(text)[1] == {"name": name}


def test_one_fact_per_statement():
    assert answer("Remember that I like tea")[1] == {"note": "you like tea"}
    assert answer("My name is Ada. I like tea.")[1] == {"name": "Ada", "likes": "tea"}


def test_what_is_remembered_is_said_in_sentences():
    known = {"likes": "Earl Grey tea", "name": "Ada", "note": "your knee hurts"}
    reply, _ = answer("What do you remember about me?", facts=known)
    assert reply == (
        "About you (I remember it in all your conversations):\n\n"
        "- You like Earl Grey tea.\n- Your name is Ada.\n"
        "- You asked me to remember that your knee hurts."
    )
    assert "likes:" not in reply and "note:" not in reply


def test_a_goal_and_a_like_in_one_sentence_are_each_kept():
    brain = BuiltinBrain()
    text = "Hi, my goal is to finish the migration, and I like tea."
    assert brain.facts_in(text) == {"likes": "tea"}
    assert brain.goal_in(text) == "finish the migration"


def test_a_like_and_a_goal_are_said_back_about_you():
    _, facts = answer("I like slow Sunday lunches with my cousins")
    assert facts == {"likes": "slow Sunday lunches with your cousins"}
    reply, _ = answer("My goal is to learn Italian before my trip")
    assert "Your goal in this conversation: **learn Italian before your trip**." in reply
    assert " is learn" not in reply and "my trip" not in reply


def test_a_long_goal_is_cut_between_words_outside_the_bold():
    goal = "build a cabin by the lake with a wood stove " + "for long winters " * 8
    reply, _ = answer(f"My goal is to {goal}")
    stated = reply.split("**")[1]
    assert stated.endswith("…") and len(stated) <= 120
    assert stated.removesuffix("…").split()[-1] in goal.split()  # a whole word


def test_where_were_we_after_a_hand_back_speaks_to_the_person():
    from datetime import UTC, datetime

    from continuity.brains import GO_ON_FROM_SUPPORT, HandoffNote, Turn

    brain = BuiltinBrain()
    said = ["My goal is to ship the compiler", "where were we?", "thanks", "what's the plan?",
            "The parser still fails on nested generics"]  # fmt: skip
    ctx = Context(
        owner_id=1, conversation_id=1, message_id=9, attempt=1, text="Where were we?",
        history=[turn for text in said for turn in (Turn("user", text), Turn("assistant", "…"))],
        handoff=HandoffNote(
            version=3, reason="handed_back", written_at=datetime.now(UTC),
            critical_context=["Handed back by Opal from support: the refund was sent"],
            next_steps=[GO_ON_FROM_SUPPORT],
        ),
    )  # fmt: skip
    plan = brain.plan(ctx)
    reply = "".join(brain.respond(ctx, plan))

    assert "support's note, without asking" not in reply  # the agent's instruction
    assert "You said: “where were we" not in reply and "“thanks”" not in reply
    assert "what's the plan" not in reply
    assert "You said: “The parser still fails on nested generics”" in reply
    assert "the refund was sent" in reply  # support's note, for the person to keep in mind
