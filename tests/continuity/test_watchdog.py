"""The watchdog's sweeps, called directly."""

from __future__ import annotations

import os
import socket
import subprocess
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from continuity.delivery.attempts.failures import runs_reap
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.heartbeats import stale_run_ids
from continuity.delivery.watchdog import (
    due_conversation_ids,
    runs_interrupt,
    watchdog_tick,
    worker_start_scan,
)
from continuity.delivery.workers import process_ended, process_gone
from continuity.models import Conversation, CrashRecord, Run
from tests.helpers.messages import send
from tests.helpers.redis_server import refusing_redis
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def clocks(settings):
    settings.CONTINUITY_HEARTBEAT_SECONDS = 1
    settings.CONTINUITY_REQUEUE_AFTER_SECONDS = 30


def age(model, pk, **fields_seconds_ago):
    now = timezone.now()
    model.objects.filter(pk=pk).update(
        **{name: now - timedelta(seconds=s) for name, s in fields_seconds_ago.items()}
    )


def test_a_run_with_an_old_heartbeat_and_no_key_is_stale(conversation):
    send(conversation)
    run = attempt_begin(conversation_id=conversation.pk)
    assert stale_run_ids(Run.objects.all()) == []
    age(Run, run.pk, heartbeat_at=3)
    assert stale_run_ids(Run.objects.all()) == [run.pk]


def test_a_run_that_beat_again_after_it_was_judged_stale_is_not_reaped(conversation):
    send(conversation)
    run = attempt_begin(conversation_id=conversation.pk)
    age(Run, run.pk, heartbeat_at=3)
    judged = stale_run_ids(Run.objects.all())
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now())  # a late heartbeat
    assert runs_reap(run_ids=judged, detected_by="watchdog") == 0
    assert Run.objects.get(pk=run.pk).state == "running"


def test_one_failing_item_does_not_stop_the_sweep(conversation, user, monkeypatch):
    from continuity.delivery.attempts import failures

    other = Conversation.objects.create(owner=user)
    for chat in (conversation, other):
        send(chat)
        age(Run, attempt_begin(conversation_id=chat.pk).pk, heartbeat_at=3)
    real_end = failures.attempt_end
    first = Run.objects.order_by("id").first().pk

    def end_or_fail(*, run_id, **kwargs):
        if run_id == first:
            raise RuntimeError("this run cannot be ended")
        return real_end(run_id=run_id, **kwargs)

    monkeypatch.setattr(failures, "attempt_end", end_or_fail)
    assert watchdog_tick()["reaped"] == 1
    assert list(Run.objects.order_by("id").values_list("state", flat=True)) == [
        "running",
        "crashed",
    ]


def test_the_watchdog_reaps_stale_runs(conversation):
    send(conversation)
    run = attempt_begin(conversation_id=conversation.pk)
    age(Run, run.pk, heartbeat_at=3)
    assert watchdog_tick()["reaped"] == 1
    assert Run.objects.get(pk=run.pk).state == "crashed"
    assert CrashRecord.objects.get().detected_by == "watchdog"


def test_a_freshly_enqueued_conversation_is_not_sent_again(
    conversation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)
    assert due_conversation_ids() == []


def test_a_conversation_whose_enqueue_is_old_is_sent_again(
    conversation, django_capture_on_commit_callbacks
):
    send(conversation)
    age(Conversation, conversation.pk, enqueued_at=31)
    assert due_conversation_ids() == [conversation.pk]
    with django_capture_on_commit_callbacks(execute=True):
        watchdog_tick()
    assert due_conversation_ids() == []  # sent again: its drain now waits in the queue


def test_a_conversation_is_sent_again_once_its_backoff_ends(conversation):
    send(conversation)
    now = timezone.now()
    Conversation.objects.filter(pk=conversation.pk).update(
        retry_at=now + timedelta(seconds=5), enqueued_at=now - timedelta(seconds=1)
    )
    assert due_conversation_ids() == []  # still backing off
    age(Conversation, conversation.pk, retry_at=1, enqueued_at=2)
    assert due_conversation_ids() == [conversation.pk]


@pytest.mark.parametrize("blocker", ["live run", "paused", "nothing waiting"])
def test_conversations_that_must_not_be_sent_again(conversation, blocker):
    message = send(conversation)
    age(Conversation, conversation.pk, enqueued_at=60)
    if blocker == "live run":
        attempt_begin(conversation_id=conversation.pk)
        age(Conversation, conversation.pk, enqueued_at=60)
    elif blocker == "paused":
        Conversation.objects.filter(pk=conversation.pk).update(state="paused")
    else:
        message.state = "done"
        message.save()
    assert due_conversation_ids() == []


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.mark.processes
def test_a_restarted_node_reaps_its_earlier_incarnations_dead_runs_without_waiting(conversation):
    send(conversation)
    run = attempt_begin(conversation_id=conversation.pk, node="w1@host")
    Run.objects.filter(pk=run.pk).update(
        incarnation="earlier", worker=f"{socket.gethostname()}:{dead_pid()}"
    )
    assert worker_start_scan(node="w2@host")["reaped"] == 0
    assert worker_start_scan(node="w1@host")["reaped"] == 1
    assert CrashRecord.objects.get(run=run).detected_by == "worker_start"


@pytest.mark.processes
def test_a_dead_process_not_yet_collected_counts_as_gone(conversation):
    """A killed worker's pool processes stay zombies until init collects them (up to two
    seconds here): a node restarted meanwhile must still reap their attempts at once."""
    ended = subprocess.Popen(["true"])  # not waited for: a zombie once it exits
    try:
        wait_for(lambda: process_ended(ended.pid), timeout=10, what=f"process {ended.pid} to end")
        assert process_gone(f"{socket.gethostname()}:{ended.pid}")
    finally:
        ended.wait()
    assert not process_gone(f"{socket.gethostname()}:{os.getpid()}")  # this one lives


def test_a_live_attempt_of_a_worker_sharing_the_node_name_is_not_reaped(conversation):
    send(conversation)
    run = attempt_begin(conversation_id=conversation.pk, node="w1@host")
    Run.objects.filter(pk=run.pk).update(incarnation="the other worker")  # its process lives
    assert worker_start_scan(node="w1@host")["reaped"] == 0
    assert Run.objects.get(pk=run.pk).state == "running"


def test_a_planned_shutdown_interrupts_only_that_nodes_runs(conversation, user):
    other, third = Conversation.objects.create(owner=user), Conversation.objects.create(owner=user)
    for chat in (conversation, other, third):
        send(chat)
    mine = attempt_begin(conversation_id=conversation.pk, node="w1@host")
    theirs = attempt_begin(conversation_id=other.pk, node="w2@host")
    namesake = attempt_begin(conversation_id=third.pk, node="w1@host")
    Run.objects.filter(pk=namesake.pk).update(incarnation="the other worker")
    assert runs_interrupt(node="w1@host") == 1
    assert Run.objects.get(pk=mine.pk).state == "interrupted"
    assert Run.objects.get(pk=theirs.pk).state == "running"
    assert Run.objects.get(pk=namesake.pk).state == "running"


@pytest.mark.django_db(transaction=True)  # the command manages its own connections
def test_watchdog_command_runs_one_sweep(conversation):
    send(conversation)
    run = attempt_begin(conversation_id=conversation.pk)
    age(Run, run.pk, heartbeat_at=3)
    call_command("watchdog", "--once")
    assert Run.objects.get(pk=run.pk).state == "crashed"


def test_while_the_broker_is_down_nothing_is_sent_and_the_next_sweep_retries(
    conversation, monkeypatch
):

    from continuity.delivery import watchdog

    send(conversation)
    age(Conversation, conversation.pk, enqueued_at=31)
    unreachable = refusing_redis()
    monkeypatch.setattr(watchdog, "redis_client", lambda: unreachable)
    assert watchdog_tick()["requeued"] == 0
    assert due_conversation_ids() == [conversation.pk]  # still due: retried next time
    monkeypatch.undo()
    assert watchdog_tick()["requeued"] == 1


def test_a_conversation_whose_drain_still_waits_in_the_queue_is_not_sent_again(
    conversation, django_capture_on_commit_callbacks
):
    import redis
    from django.conf import settings

    from continuity.delivery.drains import drain_marker_key
    from continuity.delivery.redis_connection import redis_client

    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)  # its drain waits in the queue, behind a backlog
    age(Conversation, conversation.pk, enqueued_at=31)
    for _ in range(3):  # sweeps during a backlog must not pile up drains
        assert watchdog_tick()["requeued"] == 0
    redis_client().delete(drain_marker_key(conversation.pk))  # Redis lost its queue and markers
    redis.Redis.from_url(settings.REDIS_URL).delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    assert due_conversation_ids() == [conversation.pk]


def test_a_marker_older_than_a_received_drain_is_orphaned_and_sent_again(
    conversation, django_capture_on_commit_callbacks
):
    """A worker that popped the drain and died before noting its receipt left the marker: the
    queue is first in, first out, so a later drain's receipt shows this one is gone."""
    import redis
    from django.conf import settings

    from continuity.delivery.drains import DRAIN_SEQUENCE_KEY, drain_received
    from continuity.delivery.redis_connection import redis_client

    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)
    age(Conversation, conversation.pk, enqueued_at=31)
    assert due_conversation_ids() == []  # its drain waits in the queue
    redis.Redis.from_url(settings.REDIS_URL).rpop(settings.CELERY_TASK_DEFAULT_QUEUE)
    later = redis_client().incr(DRAIN_SEQUENCE_KEY)  # another conversation's drain, sent after
    drain_received(conversation_id=conversation.pk + 10_000, sequence=later)
    assert due_conversation_ids() == [conversation.pk]


def test_a_planned_shutdown_also_interrupts_an_attempt_that_began_meanwhile(
    conversation, user, monkeypatch
):
    from continuity.delivery import watchdog

    late = Conversation.objects.create(owner=user)
    send(conversation)
    send(late)
    first = attempt_begin(conversation_id=conversation.pk, node="w1@host")
    real_end = watchdog.attempt_end
    began_meanwhile = []

    def end_while_another_begins(**kwargs):
        if not began_meanwhile:  # its start commits after the handoff listed the node's runs
            began_meanwhile.append(attempt_begin(conversation_id=late.pk, node="w1@host"))
        return real_end(**kwargs)

    monkeypatch.setattr(watchdog, "attempt_end", end_while_another_begins)
    assert runs_interrupt(node="w1@host") == 2
    assert set(Run.objects.values_list("pk", "state")) == {
        (first.pk, "interrupted"),
        (began_meanwhile[0].pk, "interrupted"),
    }


def test_a_new_message_replaces_an_orphaned_marker(
    conversation, django_capture_on_commit_callbacks
):
    """A drain popped by a worker that died before noting its receipt leaves its marker behind:
    the next message must send a drain anyway, not wait for the marker to expire."""
    import redis
    from django.conf import settings

    from continuity.delivery.drains import DRAIN_SEQUENCE_KEY, drain_received
    from continuity.delivery.redis_connection import redis_client

    broker = redis.Redis.from_url(settings.REDIS_URL)
    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)
    broker.delete("celery")  # the popped drain, lost with its worker
    later = redis_client().incr(DRAIN_SEQUENCE_KEY)
    drain_received(conversation_id=conversation.pk + 10_000, sequence=later)
    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)
    assert broker.llen("celery") == 1


def test_the_watchdog_replaces_an_orphaned_marker_and_sends(
    conversation, django_capture_on_commit_callbacks
):
    import redis
    from django.conf import settings

    from continuity.delivery.drains import DRAIN_SEQUENCE_KEY, drain_marker_key, drain_received
    from continuity.delivery.redis_connection import redis_client

    broker = redis.Redis.from_url(settings.REDIS_URL)
    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)
    orphan = int(redis_client().get(drain_marker_key(conversation.pk)))
    later = redis_client().incr(DRAIN_SEQUENCE_KEY)
    drain_received(conversation_id=conversation.pk + 10_000, sequence=later)
    age(Conversation, conversation.pk, enqueued_at=31)
    broker.delete("celery")
    with django_capture_on_commit_callbacks(execute=True):
        assert watchdog_tick()["requeued"] == 1
    assert broker.llen("celery") == 1  # really sent, not just counted
    assert int(redis_client().get(drain_marker_key(conversation.pk))) > later > orphan
    assert due_conversation_ids() == []


def test_in_a_quiet_system_the_watchdog_replaces_a_marker_whose_drain_is_in_no_queue(
    conversation, django_capture_on_commit_callbacks
):
    """A drain popped by a worker that died before noting its receipt, and no drain received
    since: its marker is older than nothing. It is in no queue, so the watchdog sends anew."""
    import redis
    from django.conf import settings

    from continuity.delivery.drains import drain_marker_key
    from continuity.delivery.redis_connection import redis_client

    broker = redis.Redis.from_url(settings.REDIS_URL)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)
    orphan = int(redis_client().get(drain_marker_key(conversation.pk)))
    assert broker.rpop(queue)  # popped by a worker that died at once
    age(Conversation, conversation.pk, enqueued_at=31)

    with django_capture_on_commit_callbacks(execute=True):
        assert watchdog_tick()["requeued"] == 1

    assert broker.llen(queue) == 1
    assert int(redis_client().get(drain_marker_key(conversation.pk))) > orphan


def test_a_drain_still_in_the_queue_is_not_sent_twice(
    conversation, django_capture_on_commit_callbacks
):
    import redis
    from django.conf import settings

    broker = redis.Redis.from_url(settings.REDIS_URL)
    with django_capture_on_commit_callbacks(execute=True):
        send(conversation)
    age(Conversation, conversation.pk, enqueued_at=31)  # a long wait in a busy queue

    assert watchdog_tick()["requeued"] == 0
    assert broker.llen(settings.CELERY_TASK_DEFAULT_QUEUE) == 1
