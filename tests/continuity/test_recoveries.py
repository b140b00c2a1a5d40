"""Restart banners: a recovery is recorded when an attempt resumes an interrupted one, and its
words, its page and the first reply all speak of what the resuming attempt was given."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from continuity.context.recoveries import recovery_words, restored_of
from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.processing import drain_conversation
from continuity.errors import MODEL_BUSY, MODEL_UNAVAILABLE
from continuity.models import Conversation, Handoff, Message, Recovery, RunContext, Summary
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


def interrupted_then_resumed(conversation, text: str, *, state: str, error: str) -> Message:
    message = send(conversation, text)
    run = attempt_begin(conversation_id=conversation.pk)
    attempt_end(run_id=run.pk, state=state, error=error, detected_by="watchdog")
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)  # skip the backoff
    drain_conversation(conversation_id=conversation.pk)
    return message


@pytest.fixture
def chat():
    conversation = ConversationFactory()
    send(conversation, "Hi, my name is Ada and my goal is to ship the compiler")
    drain_conversation(conversation_id=conversation.pk)
    return conversation


def test_a_crash_then_a_resume_records_a_recovery_the_banner_and_the_reply_speak_of(chat):
    message = interrupted_then_resumed(
        chat, "What's my name?", state="crashed", error="Heartbeat stopped"
    )
    recovery = Recovery.objects.get(message=message)
    assert recovery.kind == "crash" and recovery.interrupted_run.state == "crashed"
    assert recovery.run.state == "completed" and recovery.down_seconds >= 0

    # The banner says it; the reply only answers.
    assert Message.objects.get(reply_to=message).text == "Your name is **Ada**."

    restored = restored_of(RunContext.objects.get(run=recovery.run))
    # The name (the goal is the conversation's, in its handoff); one earlier exchange.
    assert (restored.facts, restored.turns) == (1, 2)
    page = Client()
    page.force_login(chat.owner)
    html = page.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    banner = html.split("data-recovery=")[1].split("</div>\n")[0]
    assert "Sorry, I was cut off at <time" in banner and banner.count("cut off") == 1
    assert "I was interrupted at <time" in banner  # behind "Show what was recovered"
    assert re.search(
        r"\(a worker process stopped\) and picked up \d+ s later from my notes on this "
        r"conversation, 1 thing I remember about you and our last 2 messages\.",
        html,
    )
    assert "handoff" not in html.split("data-recovery=")[1].split("</aside>")[0]
    assert reverse("chat:recovery", args=[chat.pk, recovery.pk]) in html


def test_the_banner_counts_every_message_the_summary_covers(chat):
    """The summary covers the messages up to and including the one it was written through."""
    first_question, first_reply = chat.messages.order_by("pk")
    send(chat, "Ownership is confusing")
    drain_conversation(conversation_id=chat.pk)
    summary = Summary.objects.create(
        conversation=chat, version=1, covers_through=first_reply, text="Ada ships a compiler."
    )
    message = interrupted_then_resumed(chat, "Where were we?", state="crashed", error="boom")
    recovery = Recovery.objects.get(message=message)

    assert recovery.run.context.summary == summary
    restored = restored_of(recovery.run.context)
    assert (restored.summary_messages, restored.turns) == (2, 2)
    page = Client()
    page.force_login(chat.owner)
    html = page.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "a summary of 2 earlier messages and our last 2 messages" in html


def test_the_banner_counts_a_bursts_exchanges_as_the_person_sees_them(chat):
    """Questions sent together are answered after the last of them arrived: the replies' ids
    come after every question's, and the summary is written through a question."""
    burst = [send(chat, text) for text in ("One more thing", "And another", "Last one")]
    drain_conversation(conversation_id=chat.pk)
    replies = [Message.objects.get(reply_to=question) for question in burst]
    assert replies[0].pk > burst[-1].pk
    Summary.objects.create(
        conversation=chat, version=1, covers_through=burst[1], text="Ada ships a compiler."
    )
    message = interrupted_then_resumed(chat, "Where were we?", state="crashed", error="boom")

    restored = restored_of(Recovery.objects.get(message=message).run.context)
    # The first exchange and the burst's first two, each a question and its reply; the last
    # exchange of the burst is among the recent turns.
    assert (restored.summary_messages, restored.turns) == (6, 2)


def test_a_planned_shutdown_is_told_as_a_planned_restart(chat):
    message = interrupted_then_resumed(
        chat, "Where were we?", state="interrupted", error="Planned shutdown of worker w1."
    )
    recovery = Recovery.objects.get(message=message)
    assert recovery.kind == "planned_shutdown"
    page = Client()
    page.force_login(chat.owner)
    html = page.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "(a planned restart) and picked up" in html


def test_an_answer_without_interruption_has_no_banner(chat):
    message = send(chat, "thanks")
    drain_conversation(conversation_id=chat.pk)
    assert not Recovery.objects.filter(message=message).exists()
    assert not Message.objects.get(reply_to=message).text.startswith("(I was interrupted")


@pytest.mark.parametrize(("who", "status"), [("owner", 200), ("other", 404), ("staff", 404)])
def test_the_recovered_context_is_shown_only_to_the_owner(chat, who, status):
    message = interrupted_then_resumed(chat, "What's my goal?", state="crashed", error="boom")
    recovery = Recovery.objects.get(message=message)
    user = {"owner": chat.owner, "other": UserFactory(), "staff": UserFactory(is_staff=True)}[who]
    client = Client()
    client.force_login(user)
    response = client.get(reverse("chat:recovery", args=[chat.pk, recovery.pk]))
    assert response.status_code == status
    if status == 200:
        html = response.content.decode()
        # The same items as the run's stored context: the facts and the earlier turn.
        assert "ship the compiler" in html and "Ada" in html
        assert (
            "Hi, my name is Ada" in html
            and "What&#x27;s my goal?" in html
            or "What's my goal" in html
        )
        assert "(a worker process stopped) and picked up" in html
        # A short document in the banner's words: one h1, sections under it, and the engine's
        # own rendering (with its jargon) only in the collapsed technical details.
        assert html.count("<h1") == 1
        document, technical = html.split('<details class="technical" data-technical-details>')
        for heading in ("My notes on this conversation", "What I remember about you"):
            assert f"<h2>{heading}</h2>" in document
        for jargon in ("handoff", "checkpoint", "task-state", "long-term memory"):
            assert jargon not in document.split("<main")[1].lower()
        assert "long-term memory" in technical.lower()  # collapsed: no `open` attribute


def test_anonymous_users_are_sent_to_log_in(chat):
    message = interrupted_then_resumed(chat, "hello", state="crashed", error="boom")
    recovery = Recovery.objects.get(message=message)
    response = Client().get(reverse("chat:recovery", args=[chat.pk, recovery.pk]))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_correction_goes_into_the_next_runs_critical_context(chat):
    message = interrupted_then_resumed(chat, "hello", state="crashed", error="boom")
    recovery = Recovery.objects.get(message=message)
    client = Client()
    client.force_login(chat.owner)
    url = reverse("chat:recovery_correct", args=[chat.pk, recovery.pk])
    assert client.get(url).status_code == 405
    response = client.post(url, {"text": "My goal is the linker, not the compiler"})
    assert response.status_code == 302
    correction = Handoff.objects.filter(conversation=chat).order_by("-version").first()
    assert correction.reason == "user_correction" and correction.author == chat.owner
    assert "Correction from the user: My goal is the linker" in correction.critical_context

    later = send(chat, "Where were we?")
    drain_conversation(conversation_id=chat.pk)
    assert RunContext.objects.get(run__message=later).handoff == correction


def test_a_resume_from_pause_is_told_as_such(chat):
    from continuity.actions import conversation_pause, conversation_resume

    message = send(chat, "What's my name?")
    run = attempt_begin(conversation_id=chat.pk)
    attempt_end(run_id=run.pk, state="crashed", error="boom", detected_by="watchdog")
    conversation_pause(conversation=Conversation.objects.get(pk=chat.pk), reason="3 crashes")
    drain_conversation(conversation_id=chat.pk)
    assert not Recovery.objects.exists()  # paused: nothing resumes
    conversation_resume(
        conversation=Conversation.objects.get(pk=chat.pk), by=UserFactory(), reason="fixed"
    )
    drain_conversation(conversation_id=chat.pk)
    assert Recovery.objects.get(message=message).kind == "pause"
    assert "interrupted" not in Message.objects.get(reply_to=message).text


# A failed attempt is recorded after its connection is closed: real commits.
@pytest.mark.django_db(transaction=True)
def test_a_message_that_ends_dead_shows_one_outcome_and_its_interruptions_as_details(chat):
    from tests.helpers.brains import RAISE

    Conversation.objects.filter(pk=chat.pk).update(brain="faulty")
    message = send(chat, f"Summarize this {RAISE}")
    run = attempt_begin(conversation_id=chat.pk)
    attempt_end(run_id=run.pk, state="crashed", error="boom", detected_by="watchdog")
    for _ in range(4):  # resumed (a recovery), then failing until it is dead-lettered
        Conversation.objects.filter(pk=chat.pk).update(retry_at=None)
        drain_conversation(conversation_id=chat.pk)
    message.refresh_from_db()
    assert message.state == "dead" and Recovery.objects.filter(message=message).count() == 1

    page = Client()
    page.force_login(chat.owner)
    html = page.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    exchange = html.split(f'id="exchange-{message.pk}"')[1].split("</article>")[0]
    assert "This message could not be processed" in exchange
    assert 'class="banner recovery"' not in exchange  # no success-sounding banner before it
    details = exchange.split("data-earlier-attempts>")[1].split("</details>")[0]
    # The first attempt was interrupted; the resumed ones failed (the outcome says so).
    assert "Details: 1 attempt was interrupted" in details
    assert details.count("I was interrupted at") == 1


def test_a_model_server_outage_is_named_as_such_and_a_wait_for_a_free_slot_is_no_recovery(chat):
    outage = interrupted_then_resumed(
        chat, "What's my name?", state="interrupted", error=f"{MODEL_UNAVAILABLE}: refused"
    )
    recovery = Recovery.objects.get(message=outage)
    assert recovery.kind == "model_unavailable"
    assert recovery_words(recovery).what == "the model server was unavailable"
    assert "interrupted" not in Message.objects.get(reply_to=outage).text

    busy = interrupted_then_resumed(
        chat, "What's my goal?", state="interrupted", error=f"{MODEL_BUSY}: all slots taken"
    )
    assert not Recovery.objects.filter(message=busy).exists()  # it only waited its turn
    assert not Message.objects.get(reply_to=busy).text.startswith("(I was interrupted")


def crashed_attempts(conversation, count: int) -> None:
    """`count` attempts on the conversation's waiting message, each crashed mid-answer, with the
    recovery that each attempt after the first records once it runs (written here: an attempt
    of this process cannot be SIGKILLed; test_console's browser test does it for real)."""
    runs = []
    for _ in range(count):
        run = attempt_begin(conversation_id=conversation.pk)
        if runs:
            Recovery.objects.create(
                conversation=conversation, message_id=run.message_id, run=run,
                interrupted_run=runs[-1], kind="crash", interrupted_at=runs[-1].started_at,
            )  # fmt: skip
        attempt_end(run_id=run.pk, state="crashed", error="boom", detected_by="watchdog")
        Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)
        runs.append(run)


def exchange_html(conversation, message) -> str:
    page = Client()
    page.force_login(conversation.owner)
    html = page.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    return html.split(f'id="exchange-{message.pk}"')[1].split("</article>")[0]


def test_a_message_cut_off_twice_then_answered_has_one_banner(chat):
    message = send(chat, "What's my name?")
    crashed_attempts(chat, 2)
    drain_conversation(conversation_id=chat.pk)
    assert Recovery.objects.filter(message=message).count() == 2
    assert Message.objects.get(reply_to=message).text == "Your name is **Ada**."

    exchange = exchange_html(chat, message)
    assert exchange.count('class="banner recovery"') == 1
    assert "Sorry, I was cut off at <time" in exchange
    assert "and 2 times in all, and started again." in exchange
    assert exchange.count("data-recovery-words=") == 2  # each, behind "Show what was recovered"


def test_a_dead_letter_counts_each_attempt_that_was_cut_off(chat, settings):
    settings.CONTINUITY_MAX_ATTEMPTS = 3
    message = send(chat, "What's my name?")
    crashed_attempts(chat, 3)
    message.refresh_from_db()
    assert message.state == "dead" and Recovery.objects.filter(message=message).count() == 2

    exchange = exchange_html(chat, message)
    assert "Details: 3 attempts were interrupted" in exchange
    assert 'class="banner recovery"' not in exchange
