"""Heartbeats keep an attempt alive; once someone else ends the run, the attempt is fenced off."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from continuity.actions import conversation_delete
from continuity.delivery import processing
from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.finish import attempt_finish
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.heartbeats import RunHeartbeat, keys_alive, run_key, stale_run_ids
from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import chunk_store, step
from continuity.delivery.redis_connection import redis_client
from continuity.errors import AttemptStopped
from continuity.models import Checkpoint, Message, ReplyChunk, Run
from tests.helpers.waiting import lock_waiters, wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # its heartbeat thread reads commits


@pytest.fixture
def run(conversation, settings) -> Run:
    settings.CONTINUITY_HEARTBEAT_SECONDS = 0.1
    message_accept(conversation=conversation, text="hello", client_id=uuid.uuid4())
    return attempt_begin(conversation_id=conversation.pk)


def wait_for_beat(run: Run, *, after) -> None:
    wait_for(
        lambda: Run.objects.get(pk=run.pk).heartbeat_at > after,
        timeout=5,
        what=f"a heartbeat of run {run.pk} on its row",
    )


def test_a_live_attempt_refreshes_its_row_and_its_redis_key(run):
    before = run.heartbeat_at
    with RunHeartbeat(run.pk) as heartbeat:
        wait_for_beat(run, after=before)
        assert keys_alive([run_key(run.pk)]) == {run_key(run.pk)}
        assert not heartbeat.stopped.is_set()
    assert keys_alive([run_key(run.pk)]) == set()  # a finished attempt leaves no key behind


def test_a_heartbeat_that_finds_its_run_ended_stops_the_attempt(run):
    with RunHeartbeat(run.pk) as heartbeat:
        attempt_end(run_id=run.pk, state="crashed", error="reaped", detected_by="watchdog")
        wait_for(heartbeat.stopped.is_set, timeout=5, what="the fenced attempt to be told")


def test_a_fenced_attempt_cannot_checkpoint_or_reply(run):
    attempt_end(run_id=run.pk, state="crashed", error="reaped", detected_by="watchdog")
    never = threading.Event()
    with pytest.raises(AttemptStopped):
        step(run, "plan", never, {}, lambda: {"intent": "x"})
    with pytest.raises(AttemptStopped):
        attempt_finish(run=run, reply_text="too late")
    assert not Checkpoint.objects.exists()
    assert not Message.objects.filter(role="assistant").exists()


def test_an_attempt_whose_conversation_was_deleted_is_stopped_and_writes_nothing(run):
    with transaction.atomic():
        conversation_delete(conversation=run.conversation)
    never = threading.Event()
    with pytest.raises(AttemptStopped):
        step(run, "plan", never, {}, lambda: {"intent": "x"})
    with pytest.raises(AttemptStopped):
        attempt_finish(run=run, reply_text="too late")
    assert not Message.objects.exists() and not Checkpoint.objects.exists()


def test_a_fenced_attempt_can_neither_store_nor_publish_a_chunk(run, monkeypatch):
    published = []
    monkeypatch.setattr(processing, "publish_reply_chunk", lambda **chunk: published.append(chunk))
    chunk_store(run=run, seq=1, text="Hello")
    assert [chunk["seq"] for chunk in published] == [1]
    attempt_end(run_id=run.pk, state="crashed", error="reaped", detected_by="watchdog")
    with pytest.raises(AttemptStopped):
        chunk_store(run=run, seq=2, text=" again")
    assert list(ReplyChunk.objects.values_list("run_id", "seq", "text")) == [(run.pk, 1, "Hello")]
    assert len(published) == 1


def test_staleness_needs_an_old_row_and_no_redis_key(run):
    runs = Run.objects.all()
    assert stale_run_ids(runs) == []
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=5))
    assert stale_run_ids(runs) == [run.pk]
    with RunHeartbeat(run.pk):  # writes the key at once
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=5))
        assert stale_run_ids(runs) == []


@pytest.mark.postgresql("makes the PostgreSQL server go away")
def test_the_redis_key_is_refreshed_while_the_database_is_away(run):
    from continuity.delivery.redis_connection import redis_client
    from tests.helpers.outages import database_refuses_connections

    key = run_key(run.pk)
    with RunHeartbeat(run.pk) as heartbeat:
        with database_refuses_connections():
            redis_client().delete(key)  # only a beat during the outage can bring it back
            wait_for(lambda: keys_alive([key]), timeout=5, what="a beat during the outage")
            written = Run.objects.get(pk=run.pk).heartbeat_at
        wait_for_beat(run, after=written)  # once the database is back
        assert not heartbeat.stopped.is_set()


def test_a_heartbeat_that_breaks_unexpectedly_stops_its_attempt_and_no_other(run, settings):
    settings.CONTINUITY_HEARTBEAT_SECONDS = 0.05

    class Broken(RunHeartbeat):
        def beat(self) -> bool:
            raise RuntimeError("unexpected")

    with Broken(run.pk) as broken:
        wait_for(broken.stopped.is_set, timeout=5, what="the attempt to be told to stop")
    # The process's heartbeat thread lives on for the next attempt.
    before = Run.objects.get(pk=run.pk).heartbeat_at
    with RunHeartbeat(run.pk) as heartbeat:
        wait_for_beat(run, after=before)
        assert not heartbeat.stopped.is_set()


def test_runs_beat_one_interval_after_they_start_whatever_the_thread_waited_for(run, settings):
    """The heartbeat thread outlives attempts: one that starts while it waits out a longer
    interval still beats on time."""
    settings.CONTINUITY_HEARTBEAT_SECONDS = 60
    with RunHeartbeat(run.pk):
        pass
    settings.CONTINUITY_HEARTBEAT_SECONDS = 0.1
    before = Run.objects.get(pk=run.pk).heartbeat_at
    with RunHeartbeat(run.pk):
        wait_for_beat(run, after=before)


def test_attempt_begin_asks_redis_before_it_locks_the_conversation(run, monkeypatch):
    """A slow Redis must not hold the conversation's row lock, which blocks every writer."""
    import socket
    import threading

    import redis
    from django.db import connection, transaction
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from continuity.delivery import heartbeats
    from continuity.models import Conversation

    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(seconds=5))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts connections, never answers
    silent.settimeout(10)
    stalled = redis.Redis(
        port=silent.getsockname()[1], socket_timeout=5, retry=Retry(NoBackoff(), 0)
    )
    monkeypatch.setattr(heartbeats, "redis_client", lambda: stalled)
    asking = threading.Thread(target=lambda: attempt_begin(conversation_id=run.conversation_id))
    asking.start()
    asked, _ = silent.accept()  # held open and never answered: attempt_begin waits on Redis
    try:
        with transaction.atomic():
            Conversation.objects.select_for_update(nowait=True).get(pk=run.conversation_id)
    finally:
        asked.close()
        asking.join()
        connection.close()
        silent.close()


@pytest.mark.postgresql("holds a row lock from another session, which SQLite does not have")
def test_a_drain_that_waited_for_the_lock_sees_the_lease_taken_meanwhile(conversation):
    import threading

    from django.db import connection, transaction

    from continuity.delivery.attempts.locking import conversation_lock

    message = message_accept(conversation=conversation, text="hello", client_id=uuid.uuid4())
    holding, release, outcomes = threading.Event(), threading.Event(), []

    def lease_taken_slowly() -> None:
        try:
            with transaction.atomic():
                conversation_lock(conversation.pk)
                Run.objects.create(conversation=conversation, message=message, attempt=1)
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    def drain_begins() -> None:
        try:
            outcomes.append(attempt_begin(conversation_id=conversation.pk))
        except Exception as error:
            outcomes.append(error)
        finally:
            connection.close()

    holder = threading.Thread(target=lease_taken_slowly)
    holder.start()
    holding.wait(10)
    drain = threading.Thread(target=drain_begins)
    drain.start()
    wait_for(lock_waiters, timeout=10, what="the drain waiting for the conversation's lock")
    release.set()
    holder.join()
    drain.join()
    assert outcomes == [None]
    assert Run.objects.filter(conversation=conversation).count() == 1


@pytest.mark.postgresql("holds a row lock from another session, which SQLite does not have")
def test_a_row_write_held_up_by_the_database_does_not_let_the_key_lapse(run):
    """The key is refreshed on a thread of its own: here the row's heartbeat waits on a lock
    (as on a black-holed connection or a stalled server) for many times the key's TTL."""
    import time

    from continuity.delivery import heartbeats
    from tests.helpers.postgres import another_session

    heartbeats._run_beats = None  # threads started with this test's interval, as a worker's are
    holder = another_session(autocommit=False)
    holder.execute("SELECT 1 FROM continuity_run WHERE id = %s FOR UPDATE", [run.pk])
    try:
        with RunHeartbeat(run.pk):
            wait_for(lambda: lock_waiters() == 1, timeout=5, what="the row's heartbeat to wait")
            lapsed, checks = [], 0
            while lock_waiters() == 1 and checks < 100:  # 100 looks over about ten TTLs
                checks += 1
                if not keys_alive([run_key(run.pk)]):
                    lapsed.append(checks)
                time.sleep(0.02)
            holder.rollback()  # the row's write goes through: the attempt ends at once
            assert checks == 100 and lapsed == []
    finally:
        holder.close()


def test_a_forked_process_never_waits_on_a_lock_its_parent_held_at_the_fork():
    """A pool process is forked from its worker while the worker's threads use Redis. Its
    client must not be the parent's: redis-py rebuilds an inherited pool under the pool's
    lock, which a parent thread may have held at the fork. The child's first command then
    hung for ever (its attempt with it)."""
    parent = redis_client()
    assert parent.ping()
    holding, fork_done = threading.Event(), threading.Event()

    def heartbeat_thread_mid_command() -> None:
        with parent.connection_pool._lock:
            holding.set()
            fork_done.wait(10)

    holder = threading.Thread(target=heartbeat_thread_mid_command)
    holder.start()
    holding.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: answer, or be ended by the alarm
        signal.alarm(10)
        try:
            os._exit(0 if redis_client().ping() else 1)
        finally:
            os._exit(2)
    fork_done.set()
    holder.join()
    _, status = os.waitpid(pid, 0)
    # 2: redis-py gave up on the lock after 5 s (ChildDeadlockedError); -14: the alarm.
    assert os.waitstatus_to_exitcode(status) == 0
