"""Worker starts and stops with real processes: shared node names, a stuck or lost database."""

from __future__ import annotations

import re
import signal
import uuid

import pytest

from continuity.delivery.inbox import message_accept
from continuity.models import CrashRecord, Message, Worker
from tests.helpers.factories import ConversationFactory
from tests.helpers.outages import terminate_other_connections
from tests.helpers.postgres import another_session
from tests.helpers.processes import WorkerProcess
from tests.helpers.promise import LONG_REPLY, assert_promise_kept, run_states, wait_finished
from tests.helpers.redis_server import session_redis_server
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]
# Celery's line for each try to reach the broker: "Trying again in 1.00 second... (4/None)", or
# "Trying again now... (1/None)" for a wait under a second.
RETRY_WAIT = re.compile(r"Trying again (?:in ([\d.]+) seconds?|now)")
SLOW = {"CONTINUITY_BUILTIN_TOKEN_DELAY": "0.05"}


def test_workers_sharing_a_node_name_leave_each_others_live_attempts_alone(processes):
    node = f"twin-{uuid.uuid4().hex[:6]}@testhost"
    first = processes.add(WorkerProcess(node=node, concurrency=1, **SLOW))
    message = message_accept(
        conversation=ConversationFactory(), text=LONG_REPLY, client_id=uuid.uuid4()
    )
    run = wait_streaming(message)
    second = processes.add(WorkerProcess(node=node, concurrency=1, **SLOW))
    wait_for(
        lambda: Worker.objects.filter(name=node, pid=second.pid).exists(),
        timeout=30,
        what="the second worker to announce itself",
    )
    assert "Another live worker" in second.log()  # the misconfiguration is reported
    second.signal(signal.SIGTERM)  # its planned shutdown must not interrupt the twin's attempt
    second.popen.wait(timeout=30)
    wait_finished([message])

    assert run_states(message) == ["completed"]
    assert Message.objects.get(pk=message.pk).runs.get().pk == run.pk
    assert not CrashRecord.objects.exists()
    assert first.alive()
    assert_promise_kept([message])


def test_a_stop_with_the_database_locked_does_not_hang(processes):
    worker = processes.add(WorkerProcess(concurrency=1))
    with another_session(autocommit=False) as blocker:
        blocker.execute("LOCK TABLE continuity_run IN ACCESS EXCLUSIVE MODE")
        worker.signal(signal.SIGTERM)
        # The handoff cannot get at the runs while the lock is held: it gives up in bounded
        # time instead of keeping the process alive.
        wait_for(lambda: not worker.alive(), timeout=40, what="the worker to exit", every=0.2)
        blocker.rollback()


def test_a_worker_records_its_stop_after_its_connection_was_lost(processes):
    worker = processes.add(WorkerProcess(concurrency=1))
    terminate_other_connections()  # what a database restart does to the worker's sessions
    worker.signal(signal.SIGTERM)
    worker.popen.wait(timeout=30)
    assert Worker.objects.get(name=worker.node).stopped_at is not None


def test_a_worker_asks_for_its_broker_again_every_second_while_it_is_away(processes):
    """Celery's own reconnect ladder waits 2 s, then 4 s, 6 s…: a broker back (or a Sentinel's
    promoted replica named) just after a try was found only at the next one, seconds later."""
    worker = processes.add(WorkerProcess())
    # Its consumer reading the queue: the broker is lost by a worker at work, not one starting.
    wait_for(lambda: " ready." in worker.log(), timeout=30, what="the worker's consumer to start")
    redis_server = session_redis_server()
    redis_server.stop()
    try:
        wait_for(
            lambda: len(RETRY_WAIT.findall(worker.log())) >= 8,
            timeout=30,
            what=lambda: f"eight tries to reach the broker\n{worker.log()[-4000:]}",
        )
    finally:
        redis_server.start()
    message = message_accept(
        conversation=ConversationFactory(), text="Back?", client_id=uuid.uuid4()
    )
    wait_finished([message], timeout=30)

    waits = [float(seconds or 0) for seconds in RETRY_WAIT.findall(worker.log())]
    assert waits and max(waits) <= 1.0, waits
    assert_promise_kept([message])


def test_a_worker_starts_without_waiting_for_other_workers(processes):
    """Celery's mingle waited a second at every start for the other workers' revoked tasks;
    nothing here revokes, and workers know each other through the database."""
    worker = processes.add(WorkerProcess(concurrency=1))
    wait_for(lambda: " ready." in worker.log(), timeout=30, what=f"ready\n{worker.log()[-2000:]}")

    assert "mingle" not in worker.log()
