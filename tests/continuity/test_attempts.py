"""Ending attempts: backoff, dead-lettering, the crash-loop breaker and planned interruptions."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models.functions import Now
from django.utils import timezone

from continuity.actions import conversation_resume
from continuity.delivery.alerts import alerts_flush
from continuity.delivery.attempts.failures import attempt_end, backoff_delay
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.drains import drain_send
from continuity.errors import InvalidTransition
from continuity.models import Alert, Conversation, CrashRecord, DeadLetter, Message, Run, Summary
from continuity.store.contexts import TURNS_SELECT
from tests.helpers.factories import UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clocks(settings):
    settings.CONTINUITY_MAX_ATTEMPTS = 3
    settings.CONTINUITY_PAUSE_AFTER_CRASHES = 3
    settings.CONTINUITY_CRASH_BACKOFF_SECONDS = [5, 30, 120, 600]


def begin(conversation) -> Run:
    Conversation.objects.filter(pk=conversation.pk).update(retry_at=None)
    run = attempt_begin(conversation_id=conversation.pk)
    assert run is not None
    return run


def crash(run: Run) -> None:
    assert attempt_end(run_id=run.pk, state="crashed", error="boom", detected_by="watchdog")


@pytest.mark.parametrize(("failures", "seconds"), [(1, 5), (2, 30), (3, 120), (4, 600), (9, 600)])
def test_backoff_grows_then_stays_at_its_last_step(failures, seconds):
    assert backoff_delay(failures) == timedelta(seconds=seconds)


def test_begin_commits_the_attempt_before_any_work(conversation):
    message = send(conversation)
    run = begin(conversation)
    message.refresh_from_db()
    assert (message.state, message.attempts, run.attempt, run.state) == (
        "processing",
        1,
        1,
        "running",
    )


def test_a_crash_records_it_requeues_the_message_and_backs_off(conversation):
    message = send(conversation)
    crash(begin(conversation))
    message.refresh_from_db()
    conversation.refresh_from_db()
    assert message.state == "queued"
    assert CrashRecord.objects.filter(message=message).count() == 1
    assert conversation.retry_at - timezone.now() == pytest.approx(
        timedelta(seconds=5), abs=timedelta(seconds=2)
    )
    assert attempt_begin(conversation_id=conversation.pk) is None  # still backing off


def test_ending_an_attempt_twice_changes_nothing(conversation):
    send(conversation)
    run = begin(conversation)
    crash(run)
    assert not attempt_end(run_id=run.pk, state="failed", error="late")
    assert Run.objects.get(pk=run.pk).state == "crashed"


def test_the_last_allowed_attempt_dead_letters_instead_of_pausing(conversation):
    message = send(conversation)
    for _ in range(3):
        crash(begin(conversation))
    message.refresh_from_db()
    conversation.refresh_from_db()
    assert message.state == "dead"
    assert conversation.state == "active" and conversation.retry_at is None
    dead_letter = DeadLetter.objects.get(message=message)
    assert "Gave up after 3 attempts" in dead_letter.reason
    assert len(dead_letter.attempts) == 3
    assert not CrashRecord.objects.filter(resolved_at=None).exists()


def test_a_permanent_failure_dead_letters_at_once(conversation):
    message = send(conversation)
    run = begin(conversation)
    attempt_end(run_id=run.pk, state="failed", error="ValueError: never", permanent=True)
    message.refresh_from_db()
    assert (message.state, message.attempts) == ("dead", 1)


def test_three_crashes_of_different_messages_pause_the_conversation(
    conversation, mailoutbox, settings, django_capture_on_commit_callbacks
):
    settings.ADMINS = [("Ops", "ops@example.org")]
    messages = [send(conversation, f"m{i}") for i in range(3)]
    for message in messages:
        run = begin(conversation)
        assert run.message_id == message.pk
        with django_capture_on_commit_callbacks(execute=True):
            crash(run)
        if message != messages[-1]:  # answered on its retry, so the next message crashes
            Message.objects.filter(pk=message.pk).update(state="done")
    conversation.refresh_from_db()
    assert conversation.state == "paused"
    assert "3 crashes" in conversation.paused_reason
    assert Alert.objects.get(conversation=conversation).kind == "conversation_paused"
    assert alerts_flush(5)  # alert mail goes out on a thread of its own, off the sweep path
    assert [mail.subject for mail in mailoutbox] == ["[Django] Conversation paused"]
    assert Message.objects.get(pk=messages[-1].pk).state == "queued"
    assert attempt_begin(conversation_id=conversation.pk) is None  # paused: nothing starts


def test_resume_clears_the_crash_count_and_processing_starts_again(conversation):
    send(conversation)
    for _ in range(2):
        crash(begin(conversation))
    Conversation.objects.filter(pk=conversation.pk).update(state="paused")
    conversation_resume(conversation=conversation, by=UserFactory(is_staff=True), reason="fixed")
    conversation.refresh_from_db()
    assert conversation.state == "active"
    assert not CrashRecord.objects.filter(resolved_at=None).exists()
    assert attempt_begin(conversation_id=conversation.pk) is not None
    with pytest.raises(InvalidTransition, match="is not paused"):
        conversation_resume(
            conversation=conversation, by=UserFactory(is_staff=True), reason="fixed"
        )


def test_crashes_outside_the_window_do_not_count(conversation, settings):
    settings.CONTINUITY_MAX_ATTEMPTS = 10
    send(conversation)
    for _ in range(2):
        crash(begin(conversation))
    CrashRecord.objects.update(detected_at=timezone.now() - timedelta(hours=2))
    crash(begin(conversation))
    conversation.refresh_from_db()
    assert conversation.state == "active"


def test_a_planned_interruption_gives_the_attempt_back(conversation):
    message = send(conversation)
    run = begin(conversation)
    attempt_end(run_id=run.pk, state="interrupted", error="Planned shutdown")
    message.refresh_from_db()
    conversation.refresh_from_db()
    assert (message.state, message.attempts) == ("queued", 0)
    assert conversation.retry_at is None and not CrashRecord.objects.exists()
    assert begin(conversation).attempt == 1


def test_only_one_attempt_holds_a_conversation(conversation):
    send(conversation, "first")
    send(conversation, "second")
    begin(conversation)
    assert attempt_begin(conversation_id=conversation.pk) is None
    assert Run.objects.filter(state="running").count() == 1


def retry_wait(conversation) -> timedelta:
    conversation.refresh_from_db()
    return conversation.retry_at - timezone.now()


def test_backoff_follows_the_messages_own_failures(conversation):
    first, second = send(conversation, "a"), send(conversation, "b")
    crash(begin(conversation))
    Message.objects.filter(pk=first.pk).update(state="done")  # answered on its retry
    run = begin(conversation)
    assert run.message_id == second.pk
    attempt_end(run_id=run.pk, state="failed", error="RuntimeError: flaky")
    assert retry_wait(conversation) == pytest.approx(timedelta(seconds=5), abs=timedelta(seconds=2))
    attempt_end(run_id=begin(conversation).pk, state="failed", error="RuntimeError: flaky")
    assert retry_wait(conversation) == pytest.approx(
        timedelta(seconds=30), abs=timedelta(seconds=2)
    )


def test_after_a_poison_message_the_next_ones_first_failure_waits_the_first_step(conversation):
    poison, after = send(conversation, "poison"), send(conversation, "after")
    for _ in range(3):
        crash(begin(conversation))
    assert Message.objects.get(pk=poison.pk).state == "dead"
    run = begin(conversation)
    assert run.message_id == after.pk
    attempt_end(run_id=run.pk, state="failed", error="RuntimeError: flaky")
    assert retry_wait(conversation) == pytest.approx(timedelta(seconds=5), abs=timedelta(seconds=2))


@pytest.mark.parametrize("skew_seconds", [-30, 30])
def test_backoff_and_crash_times_use_the_database_clock(conversation, monkeypatch, skew_seconds):
    """A worker whose clock is off by half a minute still backs off 5 s on the database's."""
    message = send(conversation)
    run = begin(conversation)
    skewed = timezone.now() + timedelta(seconds=skew_seconds)
    monkeypatch.setattr(timezone, "now", lambda: skewed)
    crash(run)
    drain_send(conversation_id=conversation.pk)
    monkeypatch.undo()
    db_now = Conversation.objects.annotate(now=Now()).values_list("now", flat=True).first()
    conversation.refresh_from_db()
    run.refresh_from_db()
    crash_record = CrashRecord.objects.get(message=message)
    assert conversation.retry_at - db_now == pytest.approx(
        timedelta(seconds=5), abs=timedelta(seconds=2)
    )
    for moment in (run.ended_at, crash_record.detected_at, conversation.enqueued_at):
        assert abs(moment - db_now) < timedelta(seconds=5)


def test_a_planned_interruption_counts_apart_and_is_capped(conversation, settings):
    settings.CONTINUITY_MAX_INTERRUPTIONS = 2
    message = send(conversation)
    for expected in (1, 2):
        attempt_end(run_id=begin(conversation).pk, state="interrupted", error="Planned shutdown")
        message.refresh_from_db()
        assert (message.state, message.attempts, message.interruptions) == (
            "queued",
            0,
            expected,
        )
    attempt_end(run_id=begin(conversation).pk, state="interrupted", error="Planned shutdown")
    message.refresh_from_db()
    assert message.state == "dead"
    assert "Interrupted 2 times" in DeadLetter.objects.get(message=message).reason


def test_a_database_outage_gives_the_attempt_back_at_once_then_with_a_backoff(conversation):
    message = send(conversation)
    lost = "Database unavailable: OperationalError"
    run = begin(conversation)
    attempt_end(run_id=run.pk, state="interrupted", error=lost)
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("queued", 0, 1)
    assert not CrashRecord.objects.exists()
    # Written to the database, so it is back: no settling wait the first time.
    conversation.refresh_from_db()
    assert (conversation.retry_at, conversation.waiting_for) == (None, "")

    # A database that keeps going away is given time to settle.
    attempt_end(run_id=begin(conversation).pk, state="interrupted", error=lost)
    assert retry_wait(conversation) == pytest.approx(timedelta(seconds=5), abs=timedelta(seconds=2))
    conversation.refresh_from_db()
    assert conversation.waiting_for == "database"


@pytest.mark.postgresql("reads PostgreSQL's query plans")
def test_every_hot_path_statement_finds_a_conversations_rows_through_an_index(
    conversation, settings
):
    """The engine's statements are prepared once per connection, and after five runs
    PostgreSQL may keep one plan for every value. Such a plan must still reach a
    conversation's messages and runs through an index made for the lookup: one that walked the
    message table's primary key, past every other conversation's messages, took 150 ms at
    150,000 messages; one that read every past run of the conversation to find the running one
    would grow with its length. The read of the turns, whose range once needed planning at
    every run, takes the index of answered questions under such a plan too."""
    from django.db import connection

    from continuity.delivery.processing import drain_conversation
    from tests.helpers.factories import ConversationFactory

    settings.CONTINUITY_BUILTIN_TOKEN_DELAY = 0
    busy = ConversationFactory()
    send(conversation, "first")
    drain_conversation(conversation_id=conversation.pk)
    first_run = Run.objects.get(conversation=conversation)
    # A long history, summarized before the other conversation's messages were written: the
    # turns after the summary lie in a range of ids that holds all of those.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO continuity_message (conversation_id, role, text, state, attempts, "
            "interruptions, version, stopped, created_at, updated_at) SELECT %s, 'user', 'x', "
            "'done', 1, 0, 1, false, now(), now() FROM generate_series(1, 5000)",
            [conversation.pk],
        )
    Summary.objects.create(
        conversation=conversation,
        version=1,
        covers_through=Message.objects.filter(conversation=conversation).last(),
        text="Hi.",
    )
    send(conversation, "after the summary")
    drain_conversation(conversation_id=conversation.pk)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO continuity_message (conversation_id, role, text, state, attempts, "
            "interruptions, version, stopped, created_at, updated_at) SELECT %s, 'user', 'x', "
            "'done', 1, 0, 1, false, now(), now() FROM generate_series(1, 20000)",
            [busy.pk],
        )
        # And a few long conversations of questions and replies: a plan made for any
        # conversation then took an index of the conversation's messages in no useful order,
        # and read and sorted all of them (33 ms at 100,000 messages).
        for _ in range(3):
            cursor.execute(
                "INSERT INTO continuity_message (conversation_id, role, text, state, attempts, "
                "interruptions, version, stopped, created_at, updated_at) SELECT %s, "
                "CASE WHEN i %% 2 = 0 THEN 'user' ELSE 'assistant' END, 'x', 'done', 1, 0, 1, "
                "false, now(), now() FROM generate_series(1, 10000) AS i",
                [ConversationFactory().pk],
            )
        cursor.execute(
            "INSERT INTO continuity_run (conversation_id, message_id, attempt, state, node, "
            "incarnation, worker, error, traceback) SELECT %s, %s, 1, 'completed', '', '', '', "
            "'', '' FROM generate_series(1, 20000)",
            [conversation.pk, first_run.message_id],
        )
        cursor.execute("ANALYZE continuity_message")
        cursor.execute("ANALYZE continuity_run")
    send(conversation, "second")  # it has a turn before it, and that turn's plan
    reads = hot_path_reads_of_a_drain(conversation)
    assert Message.objects.filter(conversation=conversation, role="assistant").count() == 3
    for text, params in reads:
        assert_reads_through_indexes_made_for_it(text, params)
    (turns,) = [(text, params) for text, params in reads if text == TURNS_SELECT]
    shown = "\n".join(statement_plan(*turns))
    assert "Index Scan Backward using message_answered_question" in shown, shown


@pytest.mark.postgresql("reads PostgreSQL's query plans")
def test_before_any_statistics_runs_and_messages_are_still_read_through_their_own_indexes(
    conversation, settings
):
    """A new deployment (or a new bench database) runs before autovacuum has analyzed its
    tables, and the planner then guesses. A fence (`id = %s AND state = %s`, prepared once for
    any state) found an index led by the state as good as the primary key, so the reply's
    fence walked every completed run ever made; and the shown branch's `hidden_with_id IS NULL`
    looked rare enough to read every message through an index of that column. A message's cost
    grew with the tables until they were analyzed. Here the tables are temporary copies, with
    the same indexes, that nothing analyzes."""
    from django.db import connection

    from continuity.delivery.processing import drain_conversation

    settings.CONTINUITY_BUILTIN_TOKEN_DELAY = 0
    send(conversation, "first")
    drain_conversation(conversation_id=conversation.pk)
    send(conversation, "second")
    reads = hot_path_reads_of_a_drain(conversation)
    fences = [text for text, _ in reads if "FROM continuity_run WHERE id = %s AND state" in text]
    assert len(fences) >= 3  # the checkpoints', the chunk's and the reply's
    with connection.cursor() as cursor:
        for table in ("continuity_message", "continuity_run"):
            cursor.execute(
                f"CREATE TEMPORARY TABLE {table} (LIKE public.{table} INCLUDING DEFAULTS "
                "INCLUDING IDENTITY) ON COMMIT DROP"
            )
            # Each index under its own name (in the temporary schema), so plans name them.
            cursor.execute("SELECT indexdef FROM pg_indexes WHERE tablename = %s", [table])
            for (definition,) in cursor.fetchall():
                cursor.execute(definition.replace(" ON public.", " ON pg_temp."))
        cursor.execute(
            "INSERT INTO continuity_message (conversation_id, role, text, state, attempts, "
            "interruptions, version, stopped, created_at, updated_at) SELECT %s, 'user', 'x', "
            "'done', 1, 0, 1, false, now(), now() FROM generate_series(1, 5000)",
            [conversation.pk + 1],
        )
        cursor.execute(
            "INSERT INTO continuity_run (conversation_id, message_id, attempt, state, node, "
            "incarnation, worker, error, traceback) SELECT %s, 1, 1, 'completed', '', '', '', "
            "'', '' FROM generate_series(1, 2000)",
            [conversation.pk + 1],
        )
    for text, params in reads:
        assert_reads_through_indexes_made_for_it(text, params)


def hot_path_reads_of_a_drain(conversation) -> list[tuple[str, list]]:
    """The engine's statements (with their values) that a drain of the conversation ran and
    that read messages or runs."""
    from django.db import connection

    from continuity.delivery.processing import drain_conversation
    from continuity.store.connection import _server_binding_cursor

    statements = []

    def capture(execute, text, params, many, context):
        if isinstance(context["cursor"].cursor, _server_binding_cursor()):
            statements.append((text, params))
        return execute(text, params, many, context)

    with connection.execute_wrapper(capture):
        drain_conversation(conversation_id=conversation.pk)
    return [
        (text, params)
        for text, params in statements
        if "continuity_message" in text or "continuity_run " in text
    ]


def assert_reads_through_indexes_made_for_it(text: str, params) -> None:
    """Under the plan PostgreSQL runs the statement with (see `statement_plan`), messages and
    runs are found through indexes made for the lookup: no scan of either table, no walk
    through the messages of the shown branch, the message table's primary key only for one
    message by its id, and runs only by their primary key or by the index of running ones."""
    plan = statement_plan(text, params)
    shown = "\n".join(plan)
    assert "Seq Scan on continuity_message" not in shown, shown
    assert "Seq Scan on continuity_run" not in shown, shown
    # The shown branch is nearly every message, and a state holds most of them: no index is
    # walked to find either.
    assert not re.search(r"Cond: .*hidden_with_id IS NULL", shown), shown
    assert not re.search(r"Index Cond: \(\(state\)::text = ", shown), shown
    run_indexes = ("continuity_run_pkey", "run_one_running_per_conversation")
    for line, below in itertools.pairwise([*plan, ""]):
        if "using continuity_message_pkey" in line:
            assert below.strip().startswith("Index Cond: (id = "), shown
        if " on continuity_run " in line and "Scan" in line:
            assert any(f"using {index} " in line for index in run_indexes), shown


def statement_plan(text: str, params) -> list[str]:
    """The plan PostgreSQL may keep for the statement, for any values."""
    from django.db import connection

    with transaction.atomic(), connection.cursor() as cursor:
        numbers = iter(range(1, len(params) + 1))
        prepared = re.sub("%s", lambda _: f"${next(numbers)}", text).replace("%%", "%")
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE checked AS {prepared}")
        try:
            cursor.execute(f"EXPLAIN EXECUTE checked({', '.join(['%s'] * len(params))})", params)
            return [line for (line,) in cursor.fetchall()]
        finally:
            cursor.execute("DEALLOCATE checked")
