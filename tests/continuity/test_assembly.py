"""Startup context assembly: the layered order of docs/design.md, stored per run by reference,
rendered as given."""

from __future__ import annotations

import pytest
from django.urls import reverse

from chat.brains.builtin import BuiltinBrain
from continuity.context.assembly import (
    MEMORY_HEADING,
    context_text,
    run_context_load,
    run_context_text,
)
from continuity.context.memory import memory_fact_forget, memory_fact_revise, memory_remember
from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.processing import context_assemble, drain_conversation
from continuity.errors import AttemptStopped
from continuity.models import Handoff, MemoryFact, Message, Run, RunContext, Summary
from tests.helpers.factories import UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db

ORDER = [
    "# Identity and rules",
    "# Long-term memory (about the person, shared by all their conversations)",
    "# Current task state (this conversation's own notes)",
    "# Summary of earlier turns",
    "# Recent turns",
    "# Arrived while the agent was busy or down",
    "# Message to answer",
]


def words(text: str) -> int:
    return len(text.split())


def test_the_context_is_assembled_in_order_and_stored_by_reference(conversation, client):
    first = send(conversation, "Hi, my name is Ada and my goal is to learn Rust")
    drain_conversation(conversation_id=conversation.pk)
    recap = send(conversation, "Where were we?")
    later = send(conversation, "Something for later")
    drain_conversation(conversation_id=conversation.pk)

    stored = RunContext.objects.get(run__message=recap)
    facts = MemoryFact.objects.current().filter(owner=conversation.owner).order_by("key")
    assert stored.facts == list(facts.values_list("pk", flat=True))
    assert stored.handoff == conversation.handoffs.get(version=1)
    assert stored.checkpoint.message == first and stored.checkpoint.step == "plan"
    assert stored.turns == [first.pk, first.reply.pk]
    assert stored.waiting == [later.pk]
    assert stored.summary is None and stored.estimated_tokens > 0

    text = run_context_text(stored)
    positions = [text.index(heading) for heading in ORDER]
    assert positions == sorted(positions)
    for expected in (
        "- name: Ada",  # the person's
        "Working memory (handoff v1, After a reply)",
        "### Current State\nWorking on: learn Rust",  # the conversation's
        "### Immediate Next Steps\n1. Say what “learn Rust” looks like when it is done",
        "Last task-state checkpoint: intent learn",
        "User: Hi, my name is Ada and my goal is to learn Rust",
        "Assistant: Nice to meet you, **Ada**!",
        "# Arrived while the agent was busy or down\nUser: Something for later",
        "# Message to answer\nUser: Where were we?",
    ):
        assert expected in text

    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    page = client.get(reverse("admin:continuity_run_change", args=[stored.run_id])).content
    assert b"Context this attempt was given" in page
    assert b"# Arrived while the agent was busy or down" in page


def test_an_old_run_renders_as_it_was_after_facts_change(conversation):
    send(conversation, "My name is Ada")
    drain_conversation(conversation_id=conversation.pk)
    question = send(conversation, "What's my name?")
    drain_conversation(conversation_id=conversation.pk)
    old = RunContext.objects.get(run__message=question)
    before = context_text(run_context_load(old))

    send(conversation, "Call me Grace")
    drain_conversation(conversation_id=conversation.pk)
    owner = conversation.owner
    assert list(MemoryFact.objects.current().filter(owner=owner).values_list("value")) == [
        ("Grace",)
    ]
    assert MemoryFact.objects.filter(owner=owner, key="name").count() == 2
    assert context_text(run_context_load(old)) == before  # "name: Ada", as the brain saw it

    memory_fact_forget(fact=MemoryFact.objects.current().get(owner=owner, key="name"))
    assert not MemoryFact.objects.filter(owner=owner).exists()
    assert "1 fact(s) the user has since asked to forget" in run_context_text(old)
    memory = run_context_text(old).split(f"# {MEMORY_HEADING}")[1].split("# Current task")[0]
    assert memory.strip() == "(nothing yet)"


def test_memory_facts_are_revised_as_new_versions(user):
    fact = memory_remember(owner_id=user.pk, key="likes", value="tea")
    assert memory_remember(owner_id=user.pk, key="likes", value="tea") == fact
    revised = memory_fact_revise(fact=fact, value="green tea")
    fact.refresh_from_db()
    assert fact.value == "tea" and fact.superseded_at is not None
    assert list(MemoryFact.objects.current().filter(owner=user)) == [revised]
    with pytest.raises(MemoryFact.DoesNotExist):
        memory_fact_revise(fact=fact, value="coffee")  # only the current version can change


def test_a_re_executed_attempt_assembles_its_own_context_with_the_newer_handoff(conversation):
    message = send(conversation, "Ownership is confusing")
    first = attempt_begin(conversation_id=conversation.pk)
    context_assemble(run=first, message=message, brain=BuiltinBrain())
    assert first.context.handoff is None
    attempt_end(
        run_id=first.pk,
        state=Run.State.INTERRUPTED,
        error="Planned shutdown of worker w1.",
        handoff_reason=Handoff.Reason.PLANNED_SHUTDOWN,
    )
    drain_conversation(conversation_id=conversation.pk)
    second = Run.objects.get(message=message, state="completed")
    assert second.context.handoff.reason == "planned_shutdown"
    assert second.context.handoff.run == first
    assert RunContext.objects.count() == 2


def test_an_attempt_that_lost_its_run_stores_no_context(conversation):
    message = send(conversation, "hello")
    run = attempt_begin(conversation_id=conversation.pk)
    attempt_end(run_id=run.pk, state=Run.State.CRASHED, error="reaped", detected_by="watchdog")
    with pytest.raises(AttemptStopped):
        context_assemble(run=run, message=message, brain=BuiltinBrain())
    assert not RunContext.objects.exists()


def test_token_counting_goes_through_the_configured_estimator(conversation, settings):
    settings.CONTINUITY_TOKEN_ESTIMATOR = "tests.continuity.test_assembly.words"
    message = send(conversation, "hello there")
    drain_conversation(conversation_id=conversation.pk)
    stored = RunContext.objects.get(run__message=message)
    assert stored.estimated_tokens == words(context_text(run_context_load(stored)))


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("concurrent transactions: SQLite lets one writer at a time in")
def test_concurrent_turns_of_one_person_store_one_current_version_of_a_fact():
    """Several workers answering one person's conversations at once all write the "note"
    fact: every write succeeds, and exactly one version stays current."""
    import threading

    from django.db import connection

    from continuity.context.memory import memory_remember
    from continuity.models import MemoryFact
    from tests.helpers.factories import UserFactory

    owner = UserFactory()
    failures: list[BaseException] = []
    start = threading.Barrier(6)

    def remember(number: int) -> None:
        try:
            start.wait(timeout=10)
            for round_ in range(5):
                memory_remember(owner_id=owner.pk, key="note", value=f"item {number}.{round_}")
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=remember, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    assert MemoryFact.objects.current().filter(owner=owner, key="note").count() == 1
    assert MemoryFact.objects.filter(owner=owner, key="note").count() >= 2


@pytest.fixture(params=[1, 2, 3, 10])
def turns_window(request, settings, monkeypatch) -> int:
    """Turns read a few at a time (`contexts.TURNS_WINDOW`), by a brain that answers at once."""
    from continuity.store import contexts

    settings.CONTINUITY_BUILTIN_TOKEN_DELAY = 0
    monkeypatch.setattr(contexts, "TURNS_WINDOW", request.param)
    return request.param


def answered(conversation, count: int) -> list[Message]:
    """`count` questions, each answered before the next is sent."""
    asked = []
    for n in range(count):
        asked.append(send(conversation, f"Question {n}"))
        drain_conversation(conversation_id=conversation.pk)
    return asked


def histories_given(monkeypatch) -> dict[int, list[tuple[str, str]]]:
    """The recent turns the brain is given from now on, as (role, text), by message answered."""
    given: dict[int, list[tuple[str, str]]] = {}
    plan = BuiltinBrain.plan

    def recording(self, context):
        given[context.message_id] = [(turn.role, turn.text) for turn in context.history]
        return plan(self, context)

    monkeypatch.setattr(BuiltinBrain, "plan", recording)
    return given


def test_every_turn_after_the_summary_is_in_the_context_however_many(
    conversation, turns_window, monkeypatch
):
    """The turns are read from a window of the newest ones; when they fill it, all are read,
    or compaction would never summarize those beyond it. The brain reads them oldest first,
    as they were written, and so does the stored context."""
    asked = answered(conversation, 3)
    given = histories_given(monkeypatch)
    last = send(conversation, "And now?")
    drain_conversation(conversation_id=conversation.pk)

    stored = RunContext.objects.get(run__message=last)
    assert stored.turns == [pk for m in asked for pk in (m.pk, m.reply.pk)]
    written = [(turn.role, turn.text) for m in asked for turn in (m, m.reply)]
    assert given[last.pk] == written
    assert [(turn.role, turn.text) for turn in run_context_load(stored).history] == written


def test_the_turns_a_summary_covers_are_left_out_however_the_window_falls(
    conversation, turns_window
):
    """The summary is read beside the turns, and the walk back through windows of turns stops
    at the last message it covers, wherever that falls in a window."""
    asked = answered(conversation, 5)
    summary = Summary.objects.create(
        conversation=conversation, version=1, covers_through=asked[1].reply, text="Two turns."
    )
    last = send(conversation, "And now?")
    drain_conversation(conversation_id=conversation.pk)

    stored = RunContext.objects.get(run__message=last)
    assert stored.summary_id == summary.pk
    assert stored.turns == [pk for m in asked[2:] for pk in (m.pk, m.reply.pk)]
