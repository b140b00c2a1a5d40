"""A model server that cannot answer is infrastructure, not the message's fault: the attempt is
given back, the server gets its own backoff, and once it has failed a few times in a row its
conversations wait for its next try instead of trying. Driven in-process against the suite's
fake OpenAI-compatible server over real HTTP: first down (nothing listens on its port), then
up on that port."""

from __future__ import annotations

import secrets
import threading
import uuid
from unittest.mock import patch

import pytest
from django.db import connection
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse

from chat.brains.openai import OpenAIBrain
from chat.branch_views import CONTINUE_TEXT
from continuity.actions import conversation_delete, conversation_take_over
from continuity.context.tokens import context_budget, tokens_estimate
from continuity.delivery import processing
from continuity.delivery.attempts import failures
from continuity.delivery.backends import (
    backend_down,
    backend_misconfigured,
    backend_slot,
    backends_check,
)
from continuity.delivery.drains import drains_waiting
from continuity.delivery.processing import drain_conversation
from continuity.models import (
    Alert,
    Checkpoint,
    Conversation,
    CrashRecord,
    DeadLetter,
    Message,
    Run,
    Summary,
)
from devtools.fake_model import FakeOpenAI, reply_to
from devtools.redis_server import free_port
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send
from tests.helpers.redis_server import refusing_redis
from tests.helpers.waiting import wait_for

# The attempt's failure is recorded after its connection is closed: real commits.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def server(settings):
    """The fake model server's address, with nothing listening there yet."""
    fake = FakeOpenAI()
    port = free_port()
    settings.CONTINUITY_OPENAI_BASE_URL = f"http://127.0.0.1:{port}/v1"
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_RETRIES = 0
    # The second wait outlasts the checks made within it (the page must still show it).
    settings.CONTINUITY_BACKEND_BACKOFF_SECONDS = [0.3, 2, 60]
    settings.CONTINUITY_BACKEND_UNAVAILABLE_AFTER = 2
    settings.ADMINS = []
    # One drain answers every message that waits, however slow a loaded machine makes it.
    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    fake.port = port
    yield fake
    if fake.server is not None:
        fake.stop()


def openai_conversation(owner) -> Conversation:
    return ConversationFactory(owner=owner, brain="openai")


def next_try_due(conversation: Conversation) -> bool:
    """The server's backoff, which the conversation waits out, is over (by the database's clock,
    which set its end)."""
    return not Conversation.objects.filter(pk=conversation.pk, retry_at__gt=Now()).exists()


def due_now(conversation: Conversation) -> None:
    """Its backoff is over (what the watchdog waits for before it sends the next drain)."""
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)


def test_a_server_that_is_down_and_comes_back_costs_no_attempt_and_answers_in_order(server):
    owner = UserFactory()
    first_chat, second_chat = openai_conversation(owner), openai_conversation(owner)
    sent = [send(first_chat, f"Question number {n}") for n in range(3)]

    drain_conversation(conversation_id=first_chat.pk)  # refused: the server is down

    failed = Run.objects.get()
    assert failed.state == "interrupted"
    assert failed.error == (
        f"Model server unavailable: The model server at http://127.0.0.1:{server.port}/v1 "
        "could not be reached for model 'fake-model' (ConnectError)."
    )
    message = Message.objects.get(pk=sent[0].pk)
    assert (message.state, message.attempts, message.interruptions) == ("queued", 0, 1)
    first_chat.refresh_from_db()
    assert first_chat.waiting_for == "model" and first_chat.retry_at is not None

    wait_for(lambda: next_try_due(first_chat), timeout=5, what="the first backoff to end")
    due_now(first_chat)
    drain_conversation(conversation_id=first_chat.pk)  # down again: now marked unavailable

    assert Run.objects.filter(state="interrupted").count() == 2
    # Within the outage the give-back is not even counted against the message.
    assert Message.objects.get(pk=sent[0].pk).interruptions == 1
    alert = Alert.objects.get()
    assert alert.kind == "model_unavailable" and "could not be reached" in alert.text

    # Another conversation of the same server waits without trying.
    waiting = send(second_chat, "Are you there?")
    drain_conversation(conversation_id=second_chat.pk)
    assert not Run.objects.filter(conversation=second_chat).exists()
    waiting.refresh_from_db()
    assert (waiting.state, waiting.attempts, waiting.interruptions) == ("queued", 0, 0)
    second_chat.refresh_from_db()
    assert second_chat.waiting_for == "model" and second_chat.retry_at is not None
    page = Client()
    page.force_login(owner)
    html = page.get(reverse("chat:conversation", args=[second_chat.pk])).content.decode()
    assert 'data-waiting-for="model"' in html
    assert "The model server isn't answering; your message is kept" in html

    server.start(port=server.port)  # back
    backend = f"openai http://127.0.0.1:{server.port}/v1"
    wait_for(lambda: backend_down(backend) is None, timeout=10, what="the server's next try")
    due_now(first_chat)
    drain_conversation(conversation_id=first_chat.pk)  # the probe: answered
    # ...which ends the other conversation's wait at once, with a drain sent for it.
    second_chat.refresh_from_db()
    assert (second_chat.retry_at, second_chat.waiting_for) == (None, "")
    assert drains_waiting([second_chat.pk]) == {second_chat.pk}
    drain_conversation(conversation_id=second_chat.pk)

    answered = [
        (m.reply_to.text, m.text) for m in Message.objects.filter(role="assistant").order_by("id")
    ]
    assert answered == [
        *((m.text, reply_to(m.text)) for m in sent),
        ("Are you there?", reply_to("Are you there?")),
    ]
    assert Message.objects.filter(role="user", state="done", attempts=1).count() == 4
    assert not CrashRecord.objects.exists() and not DeadLetter.objects.exists()
    assert backend_down(backend) is None


def test_an_attempt_given_back_uncounted_goes_on_from_its_checkpoints(server, settings):
    """Within a declared outage (here from the first failure) the give-back is not counted, so
    nothing on the message says an attempt ran. The next attempt still reuses the steps it
    stored; storing them again failed it and charged the message (seen in a chaos run)."""
    settings.CONTINUITY_BACKEND_UNAVAILABLE_AFTER = 1
    chat = openai_conversation(UserFactory())
    question = send(chat, "Remember that the oven runs hot")

    drain_conversation(conversation_id=chat.pk)  # refused after its plan was stored

    message = Message.objects.get(pk=question.pk)
    assert (message.state, message.attempts, message.interruptions) == ("queued", 0, 0)
    assert list(Checkpoint.objects.filter(message=question).values_list("step", flat=True)) == [
        "plan"
    ]
    server.start(port=server.port)
    backend = f"openai http://127.0.0.1:{server.port}/v1"
    wait_for(lambda: backend_down(backend) is None, timeout=10, what="the server's next try")
    due_now(chat)
    drain_conversation(conversation_id=chat.pk)

    runs = Run.objects.filter(message=question).order_by("id")
    assert [(run.state, run.error[:24]) for run in runs] == [
        ("interrupted", "Model server unavailable"),
        ("completed", ""),
    ]
    message.refresh_from_db()
    assert (message.state, message.attempts) == ("done", 1)
    assert Message.objects.get(reply_to=question).text == reply_to(question.text)


def test_failures_within_a_backoff_count_once(settings):
    """The conversations whose attempts were under way when the server went, or began with it,
    fail together: one failure of the server, not one each, or 200 of them would take the
    backoff to its longest at once."""
    from continuity.delivery.backends import backend_failed

    settings.CONTINUITY_BACKEND_BACKOFF_SECONDS = [5.0, 10.0, 60.0]
    backend = f"openai http://127.0.0.1:{free_port()}/v1"
    downs = [backend_failed(backend, reason="refused", retry_after=None) for _ in range(20)]
    assert {down.failures for down in downs} == {1}
    assert downs[0].wait == 5.0 and all(0 < down.wait <= 5.0 for down in downs)
    assert not Alert.objects.exists()


def test_without_redis_a_failure_waits_the_first_backoff_unshared(monkeypatch, settings):

    from continuity.delivery import backends

    settings.CONTINUITY_BACKEND_BACKOFF_SECONDS = [5.0, 10.0]
    unreachable = refusing_redis()
    monkeypatch.setattr(backends, "redis_client", lambda: unreachable)

    down = backends.backend_failed("openai http://x/v1", reason="refused", retry_after=None)

    assert (down.failures, down.wait, down.unavailable) == (1, 5.0, False)
    assert not Alert.objects.exists()


def test_a_reply_cut_off_at_the_length_limit_is_kept_marked_and_can_be_continued(server, settings):
    settings.CONTINUITY_OPENAI_MAX_TOKENS = 3
    server.start(port=server.port)
    owner = UserFactory()
    chat = openai_conversation(owner)
    question = send(chat, "one two three four")

    drain_conversation(conversation_id=chat.pk)

    reply = Message.objects.get(reply_to=question)
    assert (reply.text, reply.cut_off, reply.stopped) == ("You said: one ", True, False)
    assert Run.objects.get(message=question).state == "completed"
    page = Client()
    page.force_login(owner)
    html = page.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "Cut off: the model reached its length limit." in html
    assert html.count("data-continue") == 1

    go_on = reverse("chat:continue", args=[chat.pk, question.pk])
    answered = page.post(go_on, {"client_id": str(uuid.uuid4())}, headers={"HX-Request": "true"})
    assert answered.status_code == 204
    follow_up = Message.objects.filter(conversation=chat, role="user").latest("id")
    assert follow_up.text == CONTINUE_TEXT and follow_up.state == "queued"
    drain_conversation(conversation_id=chat.pk)
    # The model is asked to go on with its cut-off reply just before the request.
    asked = server.streamed()[-1]["messages"]
    assert asked[-2:] == [
        {"role": "assistant", "content": "You said: one "},
        {"role": "user", "content": CONTINUE_TEXT},
    ]

    settings.CONTINUITY_OPENAI_MAX_TOKENS = 100
    whole = send(chat, "short")
    drain_conversation(conversation_id=chat.pk)
    assert not Message.objects.get(reply_to=whole).cut_off
    refused = page.post(
        reverse("chat:continue", args=[chat.pk, whole.pk]),
        {"client_id": str(uuid.uuid4())},
        headers={"HX-Request": "true"},
    )
    assert refused.status_code == 409
    assert refused.content.decode() == "Only a reply that was cut off can be continued."


def test_a_stream_ended_without_a_finish_reason_is_given_back_then_answered_whole(server):
    server.start(port=server.port)
    chat = openai_conversation(UserFactory())
    question = send(chat, "one two three four five")
    server.interrupt_after(words=3)

    drain_conversation(conversation_id=chat.pk)  # the server ends the stream after 3 words

    run = Run.objects.get(message=question)
    assert run.state == "interrupted"
    assert "ended the reply without finishing it (no finish_reason" in run.error
    question.refresh_from_db()
    assert (question.state, question.attempts) == ("queued", 0)
    assert not Message.objects.filter(reply_to=question).exists()

    backend = f"openai http://127.0.0.1:{server.port}/v1"
    wait_for(lambda: backend_down(backend) is None, timeout=10, what="the server's next try")
    due_now(chat)
    drain_conversation(conversation_id=chat.pk)

    (reply,) = Message.objects.filter(reply_to=question)
    assert reply.text == reply_to(question.text) and not reply.cut_off
    assert Message.objects.get(pk=question.pk).attempts == 1
    assert not DeadLetter.objects.exists() and not CrashRecord.objects.exists()


def test_an_empty_reply_is_never_stored_as_an_answer(server, settings):
    settings.CONTINUITY_MAX_ATTEMPTS = 2
    server.start(port=server.port)
    chat = openai_conversation(UserFactory())
    question = send(chat, "Say something")
    server.empty_next(times=2)

    drain_conversation(conversation_id=chat.pk)
    due_now(chat)
    drain_conversation(conversation_id=chat.pk)

    assert list(Run.objects.filter(message=question).values_list("state", flat=True)) == [
        "failed",
        "failed",
    ]
    assert not Message.objects.filter(reply_to=question).exists()
    dead = DeadLetter.objects.get(message=question)
    assert "the assistant's reply was empty" in dead.reason


@pytest.fixture
def windowed(settings):
    """A model server with a small window, which it tells at /props as llama.cpp's does."""
    fake = FakeOpenAI(delay=0, context_tokens=600).start()
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_TOKENS = 100
    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    yield fake
    fake.stop()


def test_the_window_is_asked_of_the_server_and_a_setting_overrides_it(windowed, settings):
    assert OpenAIBrain().context_window() == 600 and OpenAIBrain.reply_tokens() == 100
    settings.CONTINUITY_OPENAI_CONTEXT_TOKENS = 150
    assert OpenAIBrain.context_window() == 150 and OpenAIBrain.reply_tokens() == 75
    assert context_budget(OpenAIBrain) == int((150 - 75) * 0.8)


def test_five_exchanges_past_a_small_window_are_compacted_and_answered(windowed):
    chat = openai_conversation(UserFactory())
    questions = []
    for number in range(5):
        words = " ".join(f"detail{number}-{n}" for n in range(40))
        questions.append(send(chat, f"Exchange {number}: {words}"))
        drain_conversation(conversation_id=chat.pk)

    # Five exchanges, far fewer than CONTINUITY_HISTORY_EXCHANGES (20): compacted by tokens.
    assert Summary.objects.filter(conversation=chat).exists()
    assert windowed.overflows == 0  # no prompt was longer than the window
    for question in questions:
        reply = Message.objects.get(reply_to=question)
        assert reply.text == reply_to(question.text) and not reply.cut_off
    assert all(request["max_tokens"] == 100 for request in windowed.streamed())


def test_a_message_longer_than_the_window_is_refused_before_it_is_sent(windowed):
    owner = UserFactory()
    chat = openai_conversation(owner)
    page = Client()
    page.force_login(owner)
    text = " ".join(f"word{n}" for n in range(1500))  # within CONTINUITY_MAX_MESSAGE_CHARS

    refused = page.post(
        reverse("chat:message_send", args=[chat.pk]),
        {"text": text, "client_id": str(uuid.uuid4())},
        headers={"HX-Request": "true"},
    )

    assert refused.status_code == 422
    html = refused.content.decode()
    tokens = tokens_estimate(text)
    assert (
        f"This message is about {tokens:,} tokens; the model&#x27;s window is 600, with 100 kept "
        "for its reply. Shorten it or send it in parts: your text is still here."
    ) in html
    assert text in html  # kept in the composer
    assert not Message.objects.filter(conversation=chat).exists()
    assert windowed.requests == []


def test_a_server_that_counts_tokens_is_never_sent_a_prompt_its_window_cannot_hold(settings):
    # A byte-level vocabulary: a token per character, four times what the estimator says.
    fake = FakeOpenAI(delay=0, context_tokens=3000, tokenizer=True, counts="characters").start()
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_TOKENS = 100
    settings.CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS = 30
    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    chat = openai_conversation(UserFactory())
    questions = []
    try:
        for number in range(8):
            words = " ".join(f"point{number}-{n}" for n in range(30))
            questions.append(send(chat, f"Exchange {number}: {words}"))
            for _ in range(3):  # an attempt given back is tried again at once
                drain_conversation(conversation_id=chat.pk)
    finally:
        fake.stop()

    assert fake.overflows == 0  # by its count, every prompt fit
    assert OpenAIBrain.token_scale() > 3  # learned from its counts, not from a refusal
    assert Summary.objects.filter(conversation=chat).exists()
    for question in questions:
        assert Message.objects.get(reply_to=question).text == reply_to(question.text)
    assert not DeadLetter.objects.exists()


def test_an_empty_stream_for_a_long_prompt_teaches_the_window_and_the_conversation_goes_on(
    settings,
):
    # llama-cpp-python's server: its window is nowhere to ask, and a prompt longer than it gets
    # a 200 with an empty stream (a request not streamed gets a 400 that states it).
    fake = FakeOpenAI(delay=0, context_tokens=300, tells_window=False).start()
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_TOKENS = 60
    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    owner = UserFactory()
    chat = openai_conversation(owner)
    try:
        long = send(chat, " ".join(f"word{n}" for n in range(400)))
        for _ in range(3):
            drain_conversation(conversation_id=chat.pk)
        assert OpenAIBrain.context_window() == 300  # as the server stated it

        # Too long for the window, whatever compaction leaves out: said, not looped on.
        dead = DeadLetter.objects.get(message=long)
        assert "maximum context length is 300 tokens" in dead.reason
        assert not Message.objects.filter(reply_to=long).exists()  # never an empty reply

        # The next message is answered, and one as long is now refused before it is stored.
        short = send(chat, "Now just say hello.")
        drain_conversation(conversation_id=chat.pk)
        assert Message.objects.get(reply_to=short).text == reply_to(short.text)
        page = Client()
        page.force_login(owner)
        refused = page.post(
            reverse("chat:message_send", args=[chat.pk]),
            {"text": long.text, "client_id": str(uuid.uuid4())},
            headers={"HX-Request": "true"},
        )
        assert refused.status_code == 422
    finally:
        fake.stop()


def test_a_concurrency_limit_queues_conversations_instead_of_interrupting_them(server, settings):
    settings.CONTINUITY_OPENAI_CONCURRENCY = 1
    server.delay = 0.05  # each reply takes about half a second
    server.start(port=server.port)
    chats = [openai_conversation(UserFactory()) for _ in range(3)]
    questions = [send(chat, "one two three four five six seven") for chat in chats]

    def drain(conversation_id: int) -> None:
        try:
            drain_conversation(conversation_id=conversation_id)
        finally:
            connection.close()

    # Drains side by side, as workers run them; each conversation given back is sent another
    # drain when its turn comes, run here as a worker would.
    for _ in range(10):
        waiting = [q.conversation_id for q in questions if not Message.objects.filter(reply_to=q)]
        drains = [threading.Thread(target=drain, args=(pk,)) for pk in waiting]
        for thread in drains:
            thread.start()
        for thread in drains:
            thread.join(timeout=60)
        if not waiting:
            break

    assert server.most_active == 1  # replies and titles, one at a time
    for question in questions:
        assert Message.objects.get(reply_to=question).text == reply_to(question.text)
    assert len(server.streamed()) == 3
    assert not Run.objects.filter(state__in=["failed", "crashed"]).exists()


def waiting_for(*chats: Conversation) -> list[str]:
    return [Conversation.objects.get(pk=chat.pk).waiting_for for chat in chats]


def test_conversations_that_find_the_server_busy_are_answered_in_turn(
    server, settings, monkeypatch
):
    settings.CONTINUITY_OPENAI_CONCURRENCY = 1
    monkeypatch.setattr(processing, "TITLE_SLOT_WAIT_SECONDS", 0)  # answers first
    server.start(port=server.port)
    first, second, third, late = (openai_conversation(UserFactory()) for _ in range(4))
    questions = {chat.pk: send(chat, f"Question {chat.pk}") for chat in (first, second, third)}
    backend = f"openai http://127.0.0.1:{server.port}/v1"

    with backend_slot(backend, limit=1) as held:  # another worker's reply holds the one slot
        assert held
        for chat in (first, second, third):
            # Given back at once, while the slot is still held: no process waits for it.
            drain_conversation(conversation_id=chat.pk)
            assert Run.objects.get(conversation=chat).state == "interrupted"
    # The freed slot is the queue's first's: only it goes on.
    assert waiting_for(first, second, third) == ["", "model_busy", "model_busy"]
    questions[late.pk] = send(late, "Me first?")
    drain_conversation(conversation_id=late.pk)  # the slot is free, but it is first's turn
    assert waiting_for(late) == ["model_busy"]

    answered = []
    for _ in range(8):  # each drain a freed slot sends, run as a worker would
        for chat in (first, second, third, late):
            if waiting_for(chat) == [""] and chat.pk not in answered:
                drain_conversation(conversation_id=chat.pk)
                if Message.objects.filter(reply_to=questions[chat.pk]).exists():
                    answered.append(chat.pk)
    assert answered == [first.pk, second.pk, third.pk, late.pk]
    assert server.most_active == 1
    assert all(Run.objects.filter(conversation=chat).count() == 2 for chat in (second, third))


def test_a_busy_give_back_committed_after_the_slot_was_freed_goes_on_at_once(server, settings):
    settings.CONTINUITY_OPENAI_CONCURRENCY = 1
    server.start(port=server.port)
    chat = openai_conversation(UserFactory())
    question = send(chat, "Are you free now?")
    backend = f"openai http://127.0.0.1:{server.port}/v1"
    freed = threading.Event()
    slot = backend_slot(backend, limit=1)
    assert slot.__enter__()  # another worker's reply
    end = failures.attempt_end_recorded

    def ended_after_the_release(run, stopped, **ended):
        # The other reply ends between this attempt's failed take and its give-back's commit:
        # the release finds no conversation waiting in the database yet.
        slot.__exit__(None, None, None)
        freed.set()
        return end(run, stopped, **ended)

    with patch.object(failures, "attempt_end_recorded", ended_after_the_release):
        drain_conversation(conversation_id=chat.pk)

    assert freed.is_set()
    assert Run.objects.get(message=question).state == "interrupted"
    chat.refresh_from_db()
    assert (chat.waiting_for, chat.retry_at) == ("", None)  # not its whole fallback wait
    drain_conversation(conversation_id=chat.pk)
    assert Message.objects.get(reply_to=question).text == reply_to(question.text)


def test_a_model_its_server_does_not_have_is_said_once_on_the_console(server, settings):
    server.start(port=server.port)
    settings.CONTINUITY_BRAIN, settings.CONTINUITY_BRAIN_CHOICES = "openai", ["openai", "builtin"]
    settings.CONTINUITY_OPENAI_MODEL = "llama3.2"  # the server has only fake-model

    backends_check()
    backends_check()  # another worker starts: said once, until staff acknowledge it

    alert = Alert.objects.get()
    assert (alert.kind, alert.text) == (
        "model_missing",
        f"The model server at {server.url} has no model 'llama3.2'; it offers 'fake-model'. "
        "Set CONTINUITY_OPENAI_MODEL to one of them: until then its answers fail, or come from "
        "another model.",
    )
    settings.CONTINUITY_OPENAI_MODEL = server.model
    backends_check()
    assert Alert.objects.count() == 1


def test_a_server_whose_model_names_are_very_long_gets_its_alert_all_the_same(server, settings):
    # Random, so PostgreSQL cannot compress it into its index's limit (about 2.7 KB).
    server.model = "org/" + secrets.token_hex(2_000)
    server.start(port=server.port)
    settings.CONTINUITY_BRAIN, settings.CONTINUITY_BRAIN_CHOICES = "openai", ["openai"]
    settings.CONTINUITY_OPENAI_MODEL = "llama3.2"

    backends_check()

    alert = Alert.objects.get()
    assert f"it offers '{server.model[:99]}…'." in alert.text and len(alert.text) < 400


def test_workers_that_find_a_wrong_model_at_the_same_moment_store_one_alert(monkeypatch, caplog):
    # Each looks for an open alert before any has stored one: both find none.
    monkeypatch.setattr(QuerySet, "exists", lambda self: False)
    problem = "The model server at http://model:8000 has no model 'llama3.2'."
    backend_misconfigured(problem)
    backend_misconfigured(problem)  # the second worker's insert meets the first's row

    assert list(Alert.objects.values_list("kind", "text")) == [("model_missing", problem)]
    assert "Alert not stored" not in caplog.text
    Alert.objects.update(acknowledged_at=Now())  # staff acknowledge it; found again, said again
    backend_misconfigured(problem)
    assert Alert.objects.filter(acknowledged_at=None).count() == 1


def test_a_prompt_the_server_refuses_as_too_long_is_compacted_then_answered(settings):
    # A server that does not tell its window, and answers a longer prompt with a 400 (vLLM's).
    fake = FakeOpenAI(delay=0, context_tokens=400, overflow="error", tells_window=False).start()
    settings.CONTINUITY_OPENAI_BASE_URL = fake.url
    settings.CONTINUITY_OPENAI_API_KEY = fake.api_key
    settings.CONTINUITY_OPENAI_MODEL = fake.model
    settings.CONTINUITY_OPENAI_MAX_TOKENS = 60
    # The fake's summary echoes what it summarizes, as long as the turns: cut off at this
    # limit, the extractive one replaces it, and compaction shrinks the prompt.
    settings.CONTINUITY_OPENAI_SUMMARY_MAX_TOKENS = 30
    chat = openai_conversation(UserFactory())
    questions = []
    try:
        for number in range(6):
            words = " ".join(f"point{number}-{n}" for n in range(40))
            questions.append(send(chat, f"Exchange {number}: {words}"))
            for _ in range(3):  # a refused attempt is given back, and tried again at once
                drain_conversation(conversation_id=chat.pk)
    finally:
        fake.stop()

    assert fake.overflows >= 1
    refused = Run.objects.filter(conversation=chat, state="interrupted")
    assert refused.exists()
    assert all(run.error.startswith("Context too long: The model server at") for run in refused)
    assert Summary.objects.filter(conversation=chat).exists()
    for question in questions:
        assert Message.objects.get(reply_to=question).text == reply_to(question.text)
    assert not DeadLetter.objects.exists()


def test_a_server_whose_slots_stay_taken_is_busy_not_failing(server, settings):
    settings.CONTINUITY_OPENAI_CONCURRENCY = 1
    server.start(port=server.port)
    chat = openai_conversation(UserFactory())
    question = send(chat, "Are you free?")
    backend = f"openai http://127.0.0.1:{server.port}/v1"

    with backend_slot(backend, limit=1) as held:  # another worker's reply
        assert held
        drain_conversation(conversation_id=chat.pk)

        run = Run.objects.get(message=question)
        assert run.state == "interrupted" and run.error.startswith("Model server busy: ")
        question.refresh_from_db()
        # Given back uncounted, and no failure of the server counted: it was answering.
        assert (question.state, question.attempts, question.interruptions) == ("queued", 0, 0)
        assert backend_down(backend) is None
        chat.refresh_from_db()
        assert chat.waiting_for == "model_busy" and chat.retry_at is not None
        page = Client()
        page.force_login(chat.owner)
        shown = page.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
        assert "The model server is busy with other conversations; your message" in shown
        assert "isn&#x27;t answering" not in shown

    # The other reply ends and frees its slot: this conversation's turn, at once.
    chat.refresh_from_db()
    assert (chat.waiting_for, chat.retry_at) == ("", None)
    drain_conversation(conversation_id=chat.pk)
    assert Message.objects.get(reply_to=question).text == reply_to(question.text)


def test_a_queued_conversation_that_went_elsewhere_gives_up_its_turn(server, settings):
    settings.CONTINUITY_OPENAI_CONCURRENCY = 1
    server.start(port=server.port)
    deleted, taken_over, behind = (openai_conversation(UserFactory()) for _ in range(3))
    questions = {
        chat.pk: send(chat, f"Question {chat.pk}") for chat in (deleted, taken_over, behind)
    }
    backend = f"openai http://127.0.0.1:{server.port}/v1"

    with backend_slot(backend, limit=1) as held:
        assert held
        for chat in (deleted, taken_over, behind):
            drain_conversation(conversation_id=chat.pk)  # each queued, in this order
        conversation_delete(conversation=deleted)
        conversation_take_over(conversation=taken_over, by=UserFactory(is_staff=True), reason="x")

    # The freed slot skips the two that will never come for it.
    assert waiting_for(behind) == [""]
    drain_conversation(conversation_id=behind.pk)
    assert Message.objects.get(reply_to=questions[behind.pk]).text == reply_to(
        questions[behind.pk].text
    )
