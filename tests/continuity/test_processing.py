"""The drain, called directly (no Celery): steps, checkpoints, ordering and the unique reply."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import IntegrityError
from django.utils import timezone

from chat.brains.builtin import BuiltinBrain
from continuity.delivery.processing import drain_conversation
from continuity.models import Checkpoint, Conversation, Message, ReplyChunk, Run
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


def reply_of(message: Message) -> str:
    return Message.objects.get(reply_to=message).text


def test_drain_answers_the_message_and_records_every_step(conversation):
    message = send(conversation, "My name is Ada")
    drain_conversation(conversation_id=conversation.pk)

    message.refresh_from_db()
    assert (message.state, message.attempts) == ("done", 1)
    assert "Ada" in reply_of(message)
    run = Run.objects.get(message=message)
    assert (run.state, run.attempt, run.ended_at is not None) == ("completed", 1, True)
    assert list(Checkpoint.objects.filter(message=message).values_list("step", flat=True)) == [
        "plan",
        "respond",
        "remember",
    ]
    streamed = "".join(ReplyChunk.objects.filter(run=run).values_list("text", flat=True))
    assert streamed == reply_of(message)


def test_a_second_drain_of_a_finished_message_adds_nothing(conversation):
    message = send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)
    drain_conversation(conversation_id=conversation.pk)
    assert Message.objects.filter(reply_to=message).count() == 1
    assert Run.objects.count() == 1


def drains_sent_from_now(monkeypatch) -> list[dict]:
    """The drain tasks sent from now on (recorded, not sent: the test drains by hand)."""
    from continuity.delivery import drains

    sent: list[dict] = []
    monkeypatch.setattr(
        drains,
        "drain_send",
        lambda *, conversation_id, **_: sent.append({"conversation_id": conversation_id}),
    )
    return sent


def test_a_drain_answers_its_conversations_queue_in_order_without_a_task_each(
    conversation, settings, monkeypatch
):
    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    sent = [send(conversation, f"note number {i}") for i in range(3)]
    drains = drains_sent_from_now(monkeypatch)
    drain_conversation(conversation_id=conversation.pk)
    replies = Message.objects.filter(role="assistant").order_by("id")
    assert [reply.reply_to_id for reply in replies] == [m.pk for m in sent]
    assert drains == []


@pytest.mark.django_db(transaction=True)  # the drain's commits send what follows
def test_once_its_slice_is_over_a_drain_sends_the_next_message_to_the_back_of_the_queue(
    conversation, settings, monkeypatch
):
    """Conversations share the workers: a drain whose slice is over answers no further message."""
    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 0
    sent = [send(conversation, f"note number {i}") for i in range(3)]
    drains = drains_sent_from_now(monkeypatch)
    for done in range(1, 4):
        drain_conversation(conversation_id=conversation.pk)
        replies = Message.objects.filter(role="assistant").order_by("id")
        assert [reply.reply_to_id for reply in replies] == [m.pk for m in sent[:done]]
    # A follow-up after each reply but the last, which left nothing waiting.
    assert drains == [{"conversation_id": conversation.pk}] * 2


@pytest.mark.django_db(transaction=True)  # the drain's commits send what follows
def test_a_drain_whose_slice_ran_out_in_the_title_sends_the_next_message_to_the_queue(
    conversation, settings, monkeypatch
):
    from continuity.delivery import processing

    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 0.2
    sent = [send(conversation, f"note number {i}") for i in range(2)]
    drains = drains_sent_from_now(monkeypatch)
    # The first reply is titled by the brain: a model may take its time.
    monkeypatch.setattr(processing, "conversation_title", lambda **kwargs: time.sleep(0.3))
    drain_conversation(conversation_id=conversation.pk)
    assert [m.reply_to_id for m in Message.objects.filter(role="assistant")] == [sent[0].pk]
    assert drains == [{"conversation_id": conversation.pk}]


@pytest.mark.parametrize("earlier_exchange", [False, True])
@pytest.mark.django_db(transaction=True)  # the drain's commits send what follows
def test_a_drain_of_a_worker_that_began_a_planned_shutdown_begins_no_further_message(
    conversation, settings, monkeypatch, earlier_exchange
):
    """After a first exchange (which may title the conversation) the next attempt begins in a
    transaction of its own, which rolls back; after a later one, in the reply's, which takes
    it back. Either way the next attempt never began, and the reply is stored."""
    from continuity.delivery import processing
    from continuity.delivery.workers import worker_stopping_mark

    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    if earlier_exchange:
        send(conversation, "hello")
        drain_conversation(conversation_id=conversation.pk)
    before = set(Run.objects.values_list("pk", flat=True))
    node = f"stopping-{uuid.uuid4().hex[:8]}@test"
    sent = [send(conversation, f"note number {i}") for i in range(3)]
    drains = drains_sent_from_now(monkeypatch)
    steps = processing.steps_run

    def steps_during_shutdown(**kwargs):
        done = steps(**kwargs)
        worker_stopping_mark(node=node)  # once the first reply is written, before it is stored
        return done

    monkeypatch.setattr(processing, "steps_run", steps_during_shutdown)
    drain_conversation(conversation_id=conversation.pk, node=node)
    # The attempt under way finishes (the handover would have interrupted it), no other goes on.
    replies = Message.objects.filter(role="assistant", reply_to__in=sent)
    assert [m.reply_to_id for m in replies] == [sent[0].pk]
    runs = Run.objects.exclude(pk__in=before).values_list("message_id", "state")
    assert list(runs) == [(sent[0].pk, "completed")]
    second = Message.objects.get(pk=sent[1].pk)
    assert (second.state, second.attempts, second.interruptions) == ("queued", 0, 0)
    assert drains == [{"conversation_id": conversation.pk}]
    drain_conversation(conversation_id=conversation.pk, node="another-worker@test")
    assert Message.objects.filter(role="assistant", reply_to__in=sent).count() == 3


@pytest.mark.django_db(transaction=True)  # the drain's commits send what follows
def test_a_drain_that_starts_once_its_worker_began_a_planned_shutdown_passes_the_slice_on(
    conversation, monkeypatch
):
    from continuity.delivery.workers import worker_stopping_mark

    node = f"stopping-{uuid.uuid4().hex[:8]}@test"
    message = send(conversation, "hello")
    drains = drains_sent_from_now(monkeypatch)
    worker_stopping_mark(node=node)
    drain_conversation(conversation_id=conversation.pk, node=node)
    assert not Run.objects.exists()
    assert Message.objects.get(pk=message.pk).attempts == 0  # no attempt used up
    assert drains == [{"conversation_id": conversation.pk}]


def test_the_database_refuses_a_second_reply_to_one_message(conversation):
    message = send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)
    with pytest.raises(IntegrityError):
        Message.objects.create(
            conversation=conversation, role="assistant", text="again", reply_to=message
        )


def test_a_live_attempt_holds_the_conversation(conversation):
    message = send(conversation, "hello")
    Run.objects.create(
        conversation=conversation, message=message, attempt=1, heartbeat_at=timezone.now()
    )
    drain_conversation(conversation_id=conversation.pk)
    message.refresh_from_db()
    assert (message.state, Run.objects.count()) == ("queued", 1)


def test_a_re_executed_attempt_reuses_stored_step_outputs(conversation):
    message = send(conversation, "hello there")
    Message.objects.filter(pk=message.pk).update(attempts=1)  # counted when it began
    earlier = Run.objects.create(
        conversation=conversation,
        message=message,
        attempt=1,
        state="crashed",
        heartbeat_at=timezone.now(),
    )
    Checkpoint.objects.create(
        message=message, run=earlier, step="plan", output={"intent": "help", "facts": {}}
    )
    drain_conversation(conversation_id=conversation.pk)
    # The stored plan says "help", although a fresh plan for "hello there" would greet.
    assert "I'm the built-in assistant" in reply_of(message)
    assert Checkpoint.objects.get(message=message, step="plan").run == earlier


def test_the_agent_recalls_facts_from_earlier_turns(conversation):
    send(conversation, "Hi, my name is Grace and my goal is to ship the compiler")
    question = send(conversation, "What's my name?")
    goal = send(conversation, "what is my goal?")
    for _ in range(3):
        drain_conversation(conversation_id=conversation.pk)
    assert reply_of(question) == "Your name is **Grace**."
    assert "ship the compiler" in reply_of(goal)


def test_where_were_we_recaps_the_conversation(conversation):
    send(conversation, "I want to learn Rust")
    send(conversation, "Ownership is confusing")
    recap = send(conversation, "Where were we?")
    for _ in range(3):
        drain_conversation(conversation_id=conversation.pk)
    text = reply_of(recap)
    assert "Ownership is confusing" in text and "learn Rust" in text


def test_a_brain_that_cannot_load_leaves_the_message_untouched(conversation, settings):
    message = send(conversation, "hello")
    settings.CONTINUITY_BRAIN = "nonexistent"
    with pytest.raises(ImproperlyConfigured, match="Unknown CONTINUITY_BRAIN 'nonexistent'"):
        drain_conversation(conversation_id=conversation.pk)
    message.refresh_from_db()
    assert (message.state, message.attempts, Run.objects.count()) == ("queued", 0, 0)


@pytest.mark.django_db(transaction=True)  # the drain's commits send what follows
def test_a_validation_error_dead_letters_at_once(conversation, monkeypatch):
    def refuse(self, context):
        raise ValidationError("This request is not valid.")

    monkeypatch.setattr(BuiltinBrain, "plan", refuse)
    message = send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)
    message.refresh_from_db()
    assert (message.state, message.attempts) == ("dead", 1)
    assert "ValidationError" in message.dead_letter.reason


@pytest.mark.postgresql("PostgreSQL's server ends the attempt's session")
@pytest.mark.django_db(transaction=True)  # its connection is ended mid-transaction
def test_losing_the_database_mid_reply_gives_the_attempt_back(conversation, monkeypatch):
    """The attempt's own server process ends mid-reply, as a restart or failover ends it: the
    attempt is interrupted (not failed), so the outage uses up none of the message's attempts."""
    from django.db import connection

    from continuity.models import CrashRecord, DeadLetter
    from tests.helpers.postgres import another_session

    respond = BuiltinBrain.respond

    def cut_off_after_the_first_token(self, context, plan, work):
        tokens = respond(self, context, plan, work)
        yield next(tokens)
        with another_session() as other:  # waits (up to 10 s) until the process has ended
            other.execute(
                "SELECT pg_terminate_backend(%s, 10000)", [connection.connection.info.backend_pid]
            )
        yield from tokens

    monkeypatch.setattr(BuiltinBrain, "respond", cut_off_after_the_first_token)
    message = send(conversation, "Hello there, how are you today?")
    drain_conversation(conversation_id=conversation.pk)

    run = Run.objects.get(message=message)
    assert run.state == "interrupted", run.error
    assert run.error.startswith("Database unavailable: OperationalError")
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("queued", 0, 1)
    assert not CrashRecord.objects.exists() and not DeadLetter.objects.exists()


def test_a_reply_deleted_by_staff_does_not_break_the_next_answers(conversation):
    first = send(conversation, "My name is Ada")
    drain_conversation(conversation_id=conversation.pk)
    Message.objects.filter(reply_to=first).delete()
    question = send(conversation, "What's my name?")
    drain_conversation(conversation_id=conversation.pk)
    assert reply_of(question) == "Your name is **Ada**."


@pytest.mark.postgresql("reads which rows PostgreSQL locks, in order")
def test_memory_rows_are_locked_in_key_order_whatever_order_the_brain_gives(conversation):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from continuity.context.memory import memory_remember_all

    message = send(conversation, "hello")
    with CaptureQueriesContext(connection) as queries:
        memory_remember_all(
            owner_id=conversation.owner_id,
            message_id=message.pk,
            facts={"name": "Ada", "goal": "ship", "likes": "tea"},
        )
    keys = [
        key
        for query in queries.captured_queries
        if "FOR UPDATE" in query["sql"]
        for key in ("goal", "likes", "name")
        if f"'{key}'" in query["sql"]
    ]
    assert keys == ["goal", "likes", "name"]


@pytest.mark.django_db(transaction=True)  # the drain's commits send what follows
def test_a_conversation_is_answered_by_the_brain_its_owner_picked(conversation):
    Conversation.objects.filter(pk=conversation.pk).update(brain="faulty")
    message = send(conversation, "[[invalid]] hello")  # only the faulty brain refuses this
    drain_conversation(conversation_id=conversation.pk)
    message.refresh_from_db()
    assert message.state == "dead" and "PermanentError" in message.dead_letter.reason


def test_the_brain_titles_a_conversation_after_its_first_reply(conversation):
    send(conversation, "Hello! My goal is to ship the compiler by May. Can you help?")
    drain_conversation(conversation_id=conversation.pk)
    conversation.refresh_from_db()
    assert conversation.title == "Ship the compiler by May"
    send(conversation, "My goal is to learn Rust")  # later messages leave the title alone
    drain_conversation(conversation_id=conversation.pk)
    conversation.refresh_from_db()
    assert conversation.title == "Ship the compiler by May"


def test_a_title_its_owner_wrote_is_kept(conversation):
    from continuity.actions import conversation_rename

    conversation_rename(conversation=conversation, title="Compiler")
    send(conversation, "My goal is to ship the compiler")
    drain_conversation(conversation_id=conversation.pk)
    conversation.refresh_from_db()
    assert conversation.title == "Compiler"


def test_a_failing_title_costs_nothing(conversation, monkeypatch):
    def broken(self, context, reply):
        raise RuntimeError("no title today")

    monkeypatch.setattr(BuiltinBrain, "title", broken)
    message = send(conversation, "Hello there, how are you today?")
    drain_conversation(conversation_id=conversation.pk)
    message.refresh_from_db()
    assert message.state == "done" and Run.objects.get(message=message).state == "completed"


@pytest.mark.django_db(transaction=True)  # the heartbeat's thread reads the run's row
def test_a_slow_start_is_not_taken_for_dead_before_its_heartbeat_runs(
    conversation, settings, monkeypatch
):
    from continuity.delivery import processing
    from continuity.delivery.heartbeats import stale_run_ids

    settings.CONTINUITY_HEARTBEAT_SECONDS = 0.1  # a run is stale 0.2 s after its last beat
    load = processing.brain_load
    seen = []

    def slow_load(name: str):
        time.sleep(0.5)  # a brain that takes a while to load, after the attempt's commit
        seen.append(stale_run_ids(Run.objects.filter(message__conversation=conversation)))
        return load(name)

    monkeypatch.setattr(processing, "brain_load", slow_load)
    send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)
    assert seen == [[]]
    assert conversation.messages.get(role=Message.Role.USER).state == Message.State.DONE


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("counts the hot path's round trips to PostgreSQL")
def test_within_a_slice_the_next_attempt_begins_in_the_transaction_that_stores_the_reply(
    conversation, settings
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from devtools.bench.counting import Cost, sql_tally

    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)  # a first exchange may be titled
    sent = [send(conversation, f"note number {i}") for i in range(3)]
    with CaptureQueriesContext(connection) as log:
        drain_conversation(conversation_id=conversation.pk)
    cost = Cost()
    sql_tally(cost, log.captured_queries)
    # The first attempt begins in a transaction of its own. Then, per message, its plan step
    # and its respond step commit, and its reply commits with the next attempt's beginning.
    assert cost.transactions == 1 + 3 * 3
    # A reply's first statement locks the conversation and reads what the next attempt needs
    # of it; only the first attempt, begun on its own, locks it with a statement of its own.
    assert cost.statement_kinds["SELECT continuity_conversation FOR UPDATE"] == 1
    replies = Message.objects.filter(role="assistant", reply_to__in=sent).order_by("id")
    assert [reply.reply_to_id for reply in replies] == [m.pk for m in sent]
    assert Run.objects.filter(message__in=sent, state="completed").count() == 3


def test_a_next_attempt_that_cannot_begin_with_the_reply_costs_the_reply_nothing(
    conversation, settings, monkeypatch
):
    from continuity.delivery import processing

    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)  # a first exchange may be titled
    sent = [send(conversation, f"note number {i}") for i in range(2)]
    prepare = processing.context_prepare
    failures = []

    def fails_once_for_the_second(*, run, message, **prepared):
        if message.pk == sent[1].pk and not failures:
            failures.append(run.pk)
            raise RuntimeError("the next message's context could not be read")
        return prepare(run=run, message=message, **prepared)

    monkeypatch.setattr(processing, "context_prepare", fails_once_for_the_second)
    drain_conversation(conversation_id=conversation.pk)
    assert failures  # it did fail inside the first reply's transaction
    assert [list(m.runs.values_list("state", flat=True)) for m in sent] == [
        ["completed"],
        ["completed"],
    ]
    replies = Message.objects.filter(role="assistant", reply_to__in=sent).order_by("id")
    assert [reply.reply_to_id for reply in replies] == [m.pk for m in sent]
    assert Message.objects.get(pk=sent[0].pk).attempts == 1


@pytest.mark.parametrize("next_in_the_replys_transaction", [False, True])
def test_an_attempt_whose_beginning_meets_a_database_error_is_noted_as_an_outage(
    conversation, settings, monkeypatch, next_in_the_replys_transaction
):
    """Its beginning's last write may carry the commit (`store.round_trip`), and the error may
    be the lost answer to it: the attempt may be running with no one to run it, and its
    reaping must then be an interruption. So a database error that ends the transaction notes
    each attempt begun in it, also when the next attempt began in the reply's transaction and
    its error comes wrapped (NextAttemptFailed)."""
    from django.db import OperationalError

    from continuity.delivery import processing
    from continuity.delivery.heartbeats import outages_noted

    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    if next_in_the_replys_transaction:
        send(conversation, "hello")
        drain_conversation(conversation_id=conversation.pk)  # a first exchange may be titled
        send(conversation, "first")
    failing = send(conversation, "the database goes away")
    prepare = processing.context_prepare
    begun = []

    def database_lost(*, run, message, **prepared):
        if message.pk == failing.pk and not begun:
            begun.append(run.pk)
            raise OperationalError("server closed the connection unexpectedly")
        return prepare(run=run, message=message, **prepared)

    monkeypatch.setattr(processing, "context_prepare", database_lost)
    if next_in_the_replys_transaction:
        drain_conversation(conversation_id=conversation.pk)  # the reply is stored alone
    else:
        with pytest.raises(OperationalError):
            processing.attempt_first(conversation_id=conversation.pk, node="")
    assert begun and outages_noted(begun) == set(begun)


def test_an_attempt_begins_only_where_a_lost_commit_would_be_noted(conversation):
    from continuity.delivery.attempts.lease import attempt_open

    message = send(conversation, "hello")
    with pytest.raises(RuntimeError, match="attempts_committing"):
        attempt_open(conversation=conversation, message=message, node="")
    assert not Run.objects.exists()


@pytest.mark.django_db(transaction=True)  # the commit whose answer is lost is a real one
def test_a_commit_whose_answer_was_lost_costs_the_next_message_nothing(
    conversation, settings, monkeypatch
):
    """The transaction that stores a reply and begins the next attempt commits, but its answer
    never comes back: the worker cannot know the next attempt began, and never runs it. When
    the watchdog reaps it, it is an interruption (issue: the next message was charged a
    crash)."""
    from django.db import OperationalError, transaction

    from continuity.delivery import processing
    from continuity.delivery.heartbeats import key_delete, run_key
    from continuity.delivery.watchdog import watchdog_tick
    from continuity.models import CrashRecord

    settings.CONTINUITY_DRAIN_SLICE_SECONDS = 60
    send(conversation, "hello")
    drain_conversation(conversation_id=conversation.pk)  # a first exchange may be titled
    first, second = send(conversation, "note number 1"), send(conversation, "note number 2")
    reply_finish = processing.reply_finish

    def answer_lost(**kwargs):
        def lost() -> None:
            raise OperationalError("server closed the connection unexpectedly")

        transaction.on_commit(lost)  # runs once the commit took, as the answer goes missing
        return reply_finish(**kwargs)

    monkeypatch.setattr(processing, "reply_finish", answer_lost)
    drain_conversation(conversation_id=conversation.pk)
    monkeypatch.undo()

    first.refresh_from_db()
    assert first.state == "done"
    orphan = Run.objects.get(message=second)
    assert orphan.state == "running"  # it began in the commit, and no one runs it
    Run.objects.filter(pk=orphan.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=60))
    key_delete(run_key(orphan.pk))
    assert watchdog_tick()["reaped"] == 1

    orphan.refresh_from_db()
    assert orphan.state == "interrupted" and orphan.error.startswith("Database unavailable")
    assert not CrashRecord.objects.exists()
    second.refresh_from_db()
    assert (second.state, second.attempts) == ("queued", 0)
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)
    drain_conversation(conversation_id=conversation.pk)
    assert Message.objects.get(pk=second.pk).state == "done"
