"""Database outages, real ones: refused connections and crash-like PostgreSQL restarts.

Losing the database is not the message's fault: attempts are given back (no crash record, no
attempt used up), nothing is dead-lettered or paused, and the web side answers 503 "kept".
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db import connection

from continuity.delivery.inbox import message_accept
from continuity.errors import DATABASE_LOST
from continuity.models import Checkpoint, Conversation, CrashRecord, DeadLetter, Message, Run
from tests.helpers.factories import ConversationFactory
from tests.helpers.outages import (
    database_refuses_connections,
    postgres_can_restart,
    postgres_restart,
    sessions_waiting_on_a_lock_ended,
)
from tests.helpers.postgres import another_session
from tests.helpers.processes import WatchdogProcess, WebProcess, WorkerProcess
from tests.helpers.promise import (
    LONG_REPLY,
    assert_promise_kept,
    run_states,
    steps_by_run,
    wait_finished,
)
from tests.helpers.relay import RELAY_HOST, TcpRelay, black_hole
from tests.helpers.waiting import lock_waiters, wait_for, wait_streaming
from tests.helpers.web import SignedInBrowser

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]


def test_a_send_while_the_database_is_away_answers_503_and_its_retry_is_stored_once(processes):
    # A request waits this long for a pooled connection before it answers 503 (10 s by
    # default, so that a crowd's burst queues instead of failing).
    web = processes.add(WebProcess(DATABASE_POOL_TIMEOUT="2"))
    conversation = ConversationFactory()
    browser = SignedInBrowser(web, conversation.owner, f"/c/{conversation.pk}/")
    body = {"text": "Remember that the release is on Monday", "client_id": str(uuid.uuid4())}
    path = f"/c/{conversation.pk}/messages/"

    with database_refuses_connections():
        status, html, headers = browser.post(path, body)
    assert status == 503, html[:500]
    assert int(headers["Retry-After"]) > 0 and "Nothing you already sent is lost" in html
    assert "Traceback" not in web.log()

    assert browser.post(path, body)[0] == 200
    assert browser.post(path, body)[0] == 200  # the composer's automatic resend, once more
    assert list(Message.objects.values_list("text", flat=True)) == [body["text"]]


def test_an_outage_longer_than_the_retry_window_is_an_interruption_not_a_crash(processes):
    """The attempt gives up recording its end while the database is away (here after 1 s):
    the watchdog, which reaps it once the database is back, ends it interrupted."""
    worker = processes.add(
        WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.05", CONTINUITY_DATABASE_RETRY_SECONDS="1")
    )
    processes.add(WatchdogProcess())
    conversation = ConversationFactory()
    message = message_accept(conversation=conversation, text=LONG_REPLY, client_id=uuid.uuid4())
    run = wait_streaming(message)

    with database_refuses_connections():
        wait_for(
            lambda: "Could not record the end of an attempt" in worker.log(),
            timeout=30,
            what="the attempt to give up recording its end",
        )
    wait_finished([message], timeout=60)

    run.refresh_from_db()
    assert run.state == "interrupted"
    assert run.error == "Database unavailable: the attempt could not record its end."
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("done", 1, 1)
    assert not CrashRecord.objects.exists() and not DeadLetter.objects.exists()
    assert_promise_kept([message])


@pytest.mark.skipif(not postgres_can_restart(), reason="needs the local cluster's pg_ctlcluster")
@pytest.mark.exclusive("restarts the machine's PostgreSQL, which every test running beside it uses")
def test_three_postgres_restarts_during_replies_dead_letter_and_pause_nothing(processes):
    """Default attempt and pause settings: three crash-like restarts hit three replies."""
    worker = processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.05"))
    processes.add(WatchdogProcess())
    conversation = ConversationFactory()
    messages = [
        message_accept(
            conversation=conversation, text=f"{LONG_REPLY} ({n})", client_id=uuid.uuid4()
        )
        for n in range(4)
    ]
    restarted_mid_reply = []
    for message in messages[:3]:
        wait_streaming(message)
        postgres_restart()
        restarted_mid_reply.append(message.pk)
    wait_finished(messages, timeout=120)

    assert settings.CONTINUITY_MAX_ATTEMPTS == 3 and settings.CONTINUITY_PAUSE_AFTER_CRASHES == 3
    assert set(
        Message.objects.filter(pk__in=[m.pk for m in messages]).values_list("state", flat=True)
    ) == {"done"}
    assert not DeadLetter.objects.exists()
    assert not CrashRecord.objects.exists()
    assert Conversation.objects.get(pk=conversation.pk).state == "active"
    interrupted = Run.objects.filter(state="interrupted")
    assert interrupted.count() >= 1
    assert all(run.error.startswith("Database unavailable") for run in interrupted)
    assert worker.alive()
    connection.close()
    assert_promise_kept(messages)


def database_relay() -> tuple[TcpRelay, str]:
    """A TCP relay of the test's to PostgreSQL, and the database URL through it."""
    database = connection.settings_dict
    relay = TcpRelay(("127.0.0.1", int(database["PORT"] or 5432))).start()
    return relay, f"postgres://{database['USER']}@{RELAY_HOST}:{relay.port}/{database['NAME']}"


def answered_after_one_outage(run: Run, message: Message) -> None:
    """The attempt the outage cut was given back, not charged, and the reply stored once."""
    run.refresh_from_db()
    assert run.state == "interrupted" and run.error.startswith("Database unavailable")
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("done", 1, 1)
    assert not CrashRecord.objects.exists() and not DeadLetter.objects.exists()
    assert_promise_kept([message])


@dataclass
class Relayed:
    relay: TcpRelay
    worker: WorkerProcess


# The worker's TCP user timeout: the production default (10 s) would only make the test longer.
BLACK_HOLE_NOTICED_MS = 3_000


@pytest.fixture
def relayed(processes):
    """A worker (writing slowly) that reaches PostgreSQL through a TCP relay of the test's,
    and a watchdog that reaches it directly."""
    relay, through_relay = database_relay()
    try:
        worker = processes.add(
            WorkerProcess(
                CONTINUITY_BUILTIN_TOKEN_DELAY="0.05",
                DATABASE_URL=through_relay,
                DATABASE_TCP_USER_TIMEOUT_MS=str(BLACK_HOLE_NOTICED_MS),
            )
        )
        processes.add(WatchdogProcess())
        yield Relayed(relay=relay, worker=worker)
    finally:
        relay.stop()


def test_a_black_holed_database_connection_fails_within_seconds_as_an_outage(relayed):
    """The worker reaches the database through a relay whose address is then black-holed
    mid-reply: its packets vanish, with no reset and no refusal. Its statements fail within
    the connection's TCP user timeout (3 s here) instead of the kernel's minutes, the attempt is
    given back as a database outage (no crash, no attempt used up) while the watchdog, which
    still reaches the database, leaves it alone (its heartbeat key lives on), and once the
    hole closes the reply is completed, once."""
    worker = relayed.worker
    message = message_accept(
        conversation=ConversationFactory(), text=LONG_REPLY, client_id=uuid.uuid4()
    )
    run = wait_streaming(message)
    with black_hole():
        wait_for(
            lambda: "Database unavailable; retrying" in worker.log(),
            timeout=30,
            what="the attempt's statement to fail on the black-holed connection",
        )
    wait_finished([message], timeout=60)

    answered_after_one_outage(run, message)


def test_an_attempt_cut_by_a_failover_is_given_back_at_once_without_the_watchdog(processes):
    """The database's connections are reset mid-reply and the next ones go through, as a
    failover to a promoted standby leaves them. The worker that saw its connection die gives
    its attempt back and sends the drain itself: no watchdog runs here to re-enqueue it."""
    relay, through_relay = database_relay()
    try:
        processes.add(
            WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.05", DATABASE_URL=through_relay)
        )
        message = message_accept(
            conversation=ConversationFactory(), text=LONG_REPLY, client_id=uuid.uuid4()
        )
        run = wait_streaming(message)
        relay.cut()
        wait_finished([message], timeout=30)
    finally:
        relay.stop()

    answered_after_one_outage(run, message)


def test_a_lost_commit_acknowledgement_is_found_out_by_the_next_attempt(relayed):
    """The COMMIT that stores the reply's step reaches the server, which commits it, but its
    answer is lost and the worker's connection reset: the worker cannot know whether it
    committed. It gives the attempt back as a database outage; the next attempt finds the
    step stored and does not write the reply again."""
    relay = relayed.relay
    message = message_accept(
        conversation=ConversationFactory(), text=LONG_REPLY, client_id=uuid.uuid4()
    )
    run = wait_streaming(message)
    relay.lose_next_commit_ack()
    wait_for(lambda: relay.commit_acks_lost == 1, timeout=30, what="a COMMIT's answer lost")
    wait_finished([message], timeout=60)

    assert run_states(message) == ["interrupted", "completed"]
    run.refresh_from_db()
    assert run.error.startswith("Database unavailable")
    assert steps_by_run(message) == {"plan": run.pk, "respond": run.pk, "remember": "retry"}
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("done", 1, 1)
    assert "Ada" in message.reply.text
    assert not CrashRecord.objects.exists() and not DeadLetter.objects.exists()
    assert_promise_kept([message])


def test_a_lost_acknowledgement_of_an_attempts_beginning_is_an_interruption_not_a_crash(relayed):
    """The COMMIT that begins an attempt reaches the server, which commits it, but its answer
    is lost (a primary lost at that moment leaves its standby with the same): the worker cannot
    know the attempt began, and no one runs it. When it is reaped, it is a database outage,
    given back and not charged, and the next attempt answers once."""
    relay = relayed.relay
    relay.lose_next_commit_ack()
    message = message_accept(conversation=ConversationFactory(), text="hi", client_id=uuid.uuid4())
    wait_for(lambda: relay.commit_acks_lost == 1, timeout=30, what="a COMMIT's answer lost")
    wait_finished([message], timeout=60)

    assert run_states(message) == ["interrupted", "completed"]
    begun_unknowingly = message.runs.order_by("id").first()
    assert begun_unknowingly.error == f"{DATABASE_LOST}: the attempt could not record its end."
    assert not Checkpoint.objects.filter(run=begun_unknowingly).exists()  # it never ran
    message.refresh_from_db()
    assert (message.state, message.attempts, message.interruptions) == ("done", 1, 1)
    assert not CrashRecord.objects.exists() and not DeadLetter.objects.exists()
    assert_promise_kept([message])


def test_a_send_whose_connection_breaks_mid_request_is_tried_again_not_refused(processes):
    """The web server's connection is ended while a send waits on it (a restart or a failover
    ends every session in flight): the send is made again on a new connection, and answers
    200 with one stored message, instead of a 503."""
    web = processes.add(WebProcess())
    conversation = ConversationFactory()
    browser = SignedInBrowser(web, conversation.owner, f"/c/{conversation.pk}/")
    body = {"text": "Remember that the release is on Monday", "client_id": str(uuid.uuid4())}
    answers: list[tuple[int, str, dict]] = []
    with another_session(autocommit=False) as holder:
        # The send's first statement locks the conversation: it waits here, mid-request.
        holder.execute(
            "SELECT 1 FROM continuity_conversation WHERE id = %s FOR UPDATE", [conversation.pk]
        )
        sender = threading.Thread(
            target=lambda: answers.append(browser.post(f"/c/{conversation.pk}/messages/", body))
        )
        sender.start()
        wait_for(lambda: lock_waiters() == 1, timeout=10, what="the send to wait on the lock")
        ended = sessions_waiting_on_a_lock_ended()
        wait_for(
            lambda: lock_waiters() == 1 or answers,
            timeout=10,
            what="the send to be made again, on a new connection",
        )
        holder.rollback()
    sender.join(timeout=30)
    status, html, _ = answers[0]
    assert ended >= 1 and status == 200, html[:500]
    assert list(Message.objects.values_list("text", flat=True)) == [body["text"]]
    assert "Database unavailable" in web.log()  # the broken try, logged and tried again
