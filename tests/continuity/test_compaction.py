"""Compaction: past 80 % of the budget, exchanges older than the last N become a stored summary."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.urls import reverse

from continuity.brains import Context, Turn
from continuity.context.assembly import ContextRefs, run_context_text
from continuity.context.compaction import compaction_candidates, exchange_tokens
from continuity.context.tokens import tokens_estimate
from continuity.delivery.processing import drain_conversation
from continuity.models import MemoryFact, Message, RunContext, Summary
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send
from tests.helpers.processes import WorkerProcess
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.django_db

BUDGET = {"CONTINUITY_HISTORY_EXCHANGES": 3, "CONTINUITY_CONTEXT_TOKENS": 1000}
TURN_1 = "Remember that the spare key is under the blue flower pot."


@pytest.fixture
def small_budget(settings):
    for name, value in BUDGET.items():
        setattr(settings, name, value)
    return settings


def answer(conversation, text: str) -> Message:
    message = send(conversation, text)
    drain_conversation(conversation_id=conversation.pk)
    return message


def pairs_before(message: Message, count: int) -> list[int]:
    users = Message.objects.filter(
        conversation_id=message.conversation_id, role="user", id__lt=message.pk
    ).order_by("-id")[:count]
    return [pk for user in reversed(users) for pk in (user.pk, user.reply.pk)]


def exchanges(*sizes: int) -> tuple[ContextRefs, Context]:
    """Refs and a context of one exchange per size, each about that many tokens."""
    exchanges, history = [], []
    for number, size in enumerate(sizes):
        exchanges.append([2 * number + 1, 2 * number + 2])
        question = "q" * (4 * size - len("User: \nAssistant: ") - 1)
        history += [Turn("user", question), Turn("assistant", "")]
    context = Context(
        owner_id=1, conversation_id=1, message_id=1, attempt=1, text="", history=history
    )
    return ContextRefs(identity="", exchanges=exchanges), context


def test_the_threshold_rule(settings):
    settings.CONTINUITY_HISTORY_EXCHANGES = 2
    settings.CONTINUITY_CONTEXT_TOKENS = 100
    refs, context = exchanges(10, 10, 10, 10)
    assert compaction_candidates(refs=refs, context=context, tokens=80) == []  # not past 80 %
    assert compaction_candidates(refs=refs, context=context, tokens=81) == [[1, 2], [3, 4]]


def test_past_the_threshold_it_compacts_by_tokens_whatever_the_number_of_exchanges(settings):
    settings.CONTINUITY_HISTORY_EXCHANGES = 20
    settings.CONTINUITY_CONTEXT_TOKENS = 100
    refs, context = exchanges(30, 30, 30, 5)  # four exchanges, far fewer than 20
    assert [exchange_tokens(refs, context)] == [[30, 30, 30, 5]]
    # 120 tokens: the oldest go until what stays is within 80, down to the newest exchange.
    assert compaction_candidates(refs=refs, context=context, tokens=120) == [[1, 2], [3, 4]]
    assert compaction_candidates(refs=refs, context=context, tokens=200) == [
        [1, 2], [3, 4], [5, 6]
    ]  # fmt: skip
    # A brain's own budget (its model's window, less its reply's room) is the one that counts.
    assert compaction_candidates(refs=refs, context=context, tokens=95, budget=1000) == []
    assert compaction_candidates(refs=refs, context=context, tokens=95, budget=50) == [
        [1, 2], [3, 4]
    ]  # fmt: skip


def test_compaction_triggers_past_the_threshold_and_keeps_the_last_n_exchanges(
    conversation, small_budget
):
    threshold = 800
    previous = None
    for number in range(1, 80):
        message = answer(conversation, f"Filler message number {number}, nothing to keep.")
        if Summary.objects.exists():
            break
        previous = RunContext.objects.get(run__message=message)
        assert previous.estimated_tokens <= threshold and previous.summary is None
    else:
        pytest.fail("no compaction within 79 exchanges")
    summary = Summary.objects.get()
    compacting = RunContext.objects.get(run__message=message)
    assert summary.run == compacting.run and summary.author is None
    # It compacted as soon as the budget ran out: one more exchange took it past the threshold.
    last_question = previous.run.message
    added = tokens_estimate(f"User: {last_question.text}\nAssistant: {last_question.reply.text}\n")
    assert previous.estimated_tokens + added > threshold
    assert compacting.summary == summary
    assert compacting.turns == pairs_before(message, 3)  # the last N exchanges, verbatim
    assert compacting.estimated_tokens < previous.estimated_tokens
    older = Message.objects.filter(
        conversation=conversation, role="user", id__lt=compacting.turns[0]
    )
    assert summary.covers_through == older.order_by("id").last()  # an exchange: question and reply
    assert Message.objects.filter(conversation=conversation).count() == 2 * number  # all kept
    handoff = conversation.handoffs.order_by("-version").first()
    assert handoff.reason == "compaction" and handoff.run == compacting.run
    assert f"compacted into summary v{summary.version}" in handoff.current_state


def test_a_fact_from_exchange_1_is_answered_after_compaction_and_a_restart(
    conversation, small_budget, processes
):
    answer(conversation, TURN_1)
    answer(conversation, "Remember that the meeting moved to Friday.")
    number = 0
    while not Summary.objects.exists():
        number += 1
        answer(conversation, f"Filler message number {number}, nothing to keep.")
    # The note in memory is the newer one: exchange 1's fact survives only in the summary.
    note = MemoryFact.objects.current().get(owner=conversation.owner, key="note")
    assert note.value == "the meeting moved to Friday"
    assert f"“{TURN_1}”" in Summary.objects.get().text

    processes.add(WorkerProcess(**{name: str(value) for name, value in BUDGET.items()}))
    question = send(conversation, "What do you remember about me?")
    wait_for(
        lambda: Message.objects.filter(reply_to=question).first(),
        timeout=60,
        what="the question to be answered by the restarted worker",
    )
    reply = Message.objects.get(reply_to=question).text
    assert "the spare key is under the blue flower pot" in reply
    stored = RunContext.objects.get(run__message=question)
    first = Message.objects.filter(conversation=conversation).order_by("id").first()
    assert first.pk not in stored.turns  # it came from the summary, not from the turns


def row_size(run_context: RunContext) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT pg_column_size(t.*) FROM {RunContext._meta.db_table} t WHERE id = %s",
            [run_context.pk],
        )
        return cursor.fetchone()[0]


@pytest.mark.postgresql("measures the stored row with pg_column_size")
def test_the_stored_context_is_the_same_size_at_exchange_10_and_exchange_2000(
    conversation, settings
):
    # Every exchange is past the threshold: each compacts down to the newest exchange.
    settings.CONTINUITY_HISTORY_EXCHANGES = 1
    settings.CONTINUITY_CONTEXT_TOKENS = 100
    answer(conversation, "Hi, my name is Ada and my goal is to learn Rust")
    for number in range(2, 10):
        answer(conversation, f"Message number {number}")
    tenth = RunContext.objects.get(run__message=answer(conversation, "Message number 10"))

    users = Message.objects.bulk_create(
        Message(conversation=conversation, role="user", text=f"Message number {n}", state="done")
        for n in range(11, 2000)
    )
    Message.objects.bulk_create(
        Message(
            conversation=conversation,
            role="assistant",
            text=f"You said: “{user.text}”.",
            state="done",
            reply_to=user,
        )
        for user in users
    )
    last = answer(conversation, "Message number 2000")
    at_2000 = RunContext.objects.get(run__message=last)

    assert Message.objects.filter(conversation=conversation, role="user").count() == 2000
    assert at_2000.turns == pairs_before(last, 1)
    for field in ("facts", "waiting"):
        assert len(getattr(at_2000, field)) == len(getattr(tenth, field))
    assert len(at_2000.turns) == len(tenth.turns) == 2
    assert at_2000.summary.version > tenth.summary.version
    # Only the ids are wider (4 digits instead of 2): nothing grows with the conversation.
    assert abs(row_size(at_2000) - row_size(tenth)) <= 2 * len(tenth.turns)
    assert "Ada" in Summary.objects.get(pk=at_2000.summary_id).text


def test_staff_edit_a_summary_as_a_new_version_that_the_next_run_uses(
    conversation, small_budget, client
):
    number = 0
    while not Summary.objects.exists():
        number += 1
        answer(conversation, f"Filler message number {number}, nothing to keep.")
    original = Summary.objects.get()
    staff = UserFactory(is_staff=True, is_superuser=True)
    client.force_login(staff)
    url = reverse("admin:continuity_summary_edit", args=[conversation.pk])
    assert client.get(url).status_code == 200
    response = client.post(
        url, {"text": "- You said: “My name is Grace.”", "based_on": original.version}
    )
    assert response.status_code == 302
    edited = Summary.objects.get(version=original.version + 1)
    assert (edited.author, edited.covers_through) == (staff, original.covers_through)
    assert Summary.objects.filter(pk=original.pk, text=original.text).exists()

    question = answer(conversation, "What do you remember?")
    assert RunContext.objects.get(run__message=question).summary == edited
    assert "My name is Grace." in question.reply.text


def test_a_user_with_compacted_conversations_can_still_be_deleted(conversation, small_budget):
    number = 0
    while not Summary.objects.exists():
        number += 1
        answer(conversation, f"Filler message number {number}, nothing to keep.")
    conversation.owner.delete()
    assert not Summary.objects.exists() and not Message.objects.exists()


def test_a_summary_staff_edit_during_a_compaction_is_kept(conversation, small_budget, monkeypatch):
    from chat.brains.builtin import BuiltinBrain
    from continuity.context.assembly import summary_latest
    from continuity.context.compaction import summary_revise

    staff = UserFactory(is_staff=True)
    staff_line = "- The spare key moved to the shed."
    summarize = BuiltinBrain.summarize
    edits = []

    def staff_edits_meanwhile(self, turns, previous_summary):
        written = summarize(self, turns, previous_summary)
        newest = summary_latest(conversation_id=conversation.pk)
        if newest is not None and not edits:  # a second compaction: staff edit during it
            edits.append(summary_revise(summary=newest, text=staff_line, author=staff))
        return written

    monkeypatch.setattr(BuiltinBrain, "summarize", staff_edits_meanwhile)
    for number in range(1, 200):
        answer(conversation, f"Filler message number {number}, nothing to keep.")
        if edits and Summary.objects.filter(conversation=conversation, author=None).count() > 1:
            break
    else:
        pytest.fail("no second compaction within 199 turns")

    (edited,) = edits
    newest = summary_latest(conversation_id=conversation.pk)
    assert newest.version > edited.version and newest.author is None
    assert staff_line in newest.text  # the compaction was made again, from staff's version
    assert Summary.objects.filter(pk=edited.pk, text=staff_line).exists()


def test_fifty_fact_stating_messages_keep_the_context_within_a_small_budget(user, settings):
    # Small: the identity, the notes' headings, one exchange and the message take 300 of it.
    settings.CONTINUITY_CONTEXT_TOKENS = 450
    conversation = ConversationFactory(owner=user)
    for number in range(1, 51):
        answer(conversation, f"I like rye number {number}. Remember that batch {number} rose well.")

    stored = RunContext.objects.filter(run__conversation=conversation).order_by("run_id")
    assert stored.count() == 50
    biggest = max(stored, key=lambda each: each.estimated_tokens)
    assert biggest.estimated_tokens <= 450, run_context_text(biggest)
    newest = Summary.objects.filter(conversation=conversation).order_by("-version").first()
    # It still holds the newest of what was summarized, and says that older lines were dropped.
    assert re.search(r"“(I like rye number|Remember that batch) 4\d", newest.text)
    assert newest.text.startswith("(Older points were dropped")
