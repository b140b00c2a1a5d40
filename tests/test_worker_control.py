"""Staff's worker controls through Celery's remote control, against real worker processes."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from continuity.celery import app as celery_app
from continuity.delivery.inbox import message_accept
from continuity.models import CrashRecord, Handoff, StaffAction, Worker
from continuity.worker import (
    BrokerUnavailable,
    CommandRefused,
    Pool,
    pools_of,
    worker_command,
)
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import WorkerProcess
from tests.helpers.promise import LONG_REPLY, assert_promise_kept, run_states, wait_finished
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]
SLOW = {"CONTINUITY_BUILTIN_TOKEN_DELAY": "0.05"}


def pool_size(worker: WorkerProcess) -> int | None:
    pool = pools_of([worker.node]).get(worker.node)
    return pool and pool.processes


def answering(worker: WorkerProcess) -> WorkerProcess:
    """Once its remote control answers: a worker subscribes to broadcasts a moment after it
    announced itself, and one sent before is not queued for it."""
    wait_for(lambda: pool_size(worker), timeout=15, what=f"{worker.node} to answer")
    return worker


def test_a_pool_grows_and_shrinks_and_each_change_is_audited(processes):
    worker = processes.add(WorkerProcess(concurrency=2))
    row = Worker.objects.get(name=worker.node)
    staff = UserFactory(username="opal", is_staff=True)
    wait_for(lambda: pool_size(worker) == 2, timeout=10, what="a pool of 2")

    # The answer waits for the change to take effect: what staff are shown next is current.
    said = worker_command(worker=row, action="grow", by=staff, reason="A busy morning")
    assert said == f"Worker {worker.node} grew its pool by one: it has 3 processes now."
    assert pool_size(worker) == 3
    said = worker_command(worker=row, action="shrink", by=staff, reason="Quiet again")
    assert said == f"Worker {worker.node} shrank its pool by one: it has 2 processes now."
    assert pool_size(worker) == 2

    actions = StaffAction.objects.order_by("id")
    assert [(a.kind, a.reason, a.worker_id, a.actor_name) for a in actions] == [
        ("pool_grow", "A busy morning", row.pk, "opal"),
        ("pool_shrink", "Quiet again", row.pk, "opal"),
    ]
    assert actions[0].details == {"worker": worker.node, "answer": "pool will grow"}


def test_a_pool_of_one_process_is_not_shrunk_to_none(processes):
    worker = answering(processes.add(WorkerProcess(concurrency=1)))
    staff = UserFactory(is_staff=True)
    with pytest.raises(CommandRefused, match="It refused: its pool has one process"):
        worker_command(
            worker=Worker.objects.get(name=worker.node), action="shrink", by=staff, reason="x"
        )
    wait_for(lambda: pool_size(worker) == 1, timeout=10, what="a pool of 1")
    assert not StaffAction.objects.exists()


def test_a_pool_restart_lets_the_running_reply_finish_then_replaces_the_processes(processes):
    worker = processes.add(WorkerProcess(concurrency=1, **SLOW))
    message = message_accept(
        conversation=ConversationFactory(), text=LONG_REPLY, client_id=uuid.uuid4()
    )
    run = wait_streaming(message)
    wait_for(
        lambda: pools_of([worker.node]).get(worker.node) == Pool(processes=1, busy=1),
        timeout=10,
        what="one busy process",
    )
    before = celery_app.control.inspect(destination=[worker.node], timeout=1).stats()
    staff = UserFactory(is_staff=True)
    worker_command(
        worker=Worker.objects.get(name=worker.node), action="restart", by=staff, reason="Leak"
    )
    wait_finished([message])
    assert run_states(message) == ["completed"]  # not interrupted, not charged
    assert message.runs.get().pk == run.pk
    assert not CrashRecord.objects.exists()

    def pool_processes():
        stats = celery_app.control.inspect(destination=[worker.node], timeout=1).stats() or {}
        return stats.get(worker.node, {}).get("pool", {}).get("processes")

    old = before[worker.node]["pool"]["processes"]
    wait_for(
        lambda: (now := pool_processes()) and not set(now) & set(old),
        timeout=20,
        what="a new pool process",
    )
    assert worker.alive()
    assert StaffAction.objects.get().kind == "pool_restart"


def test_a_graceful_shutdown_hands_the_running_reply_over_to_another_worker(processes):
    leaving = answering(processes.add(WorkerProcess(concurrency=1, **SLOW)))
    message = message_accept(
        conversation=ConversationFactory(), text=LONG_REPLY, client_id=uuid.uuid4()
    )
    wait_streaming(message)
    staff = UserFactory(is_staff=True)
    said = worker_command(
        worker=Worker.objects.get(name=leaving.node),
        action="shutdown",
        by=staff,
        reason="Moving to a new host",
    )
    assert "shuts down" in said
    wait_for(lambda: not leaving.alive(), timeout=40, what="the worker to exit", every=0.2)
    assert leaving.popen.returncode == 0
    assert Worker.objects.get(name=leaving.node).stopped_at is not None
    assert run_states(message) == ["interrupted"]
    handoff = Handoff.objects.get(conversation=message.conversation)
    assert handoff.reason == Handoff.Reason.PLANNED_SHUTDOWN

    processes.add(WorkerProcess(concurrency=1))
    wait_finished([message])
    assert run_states(message) == ["interrupted", "completed"]
    assert not CrashRecord.objects.exists()
    assert_promise_kept([message])
    assert StaffAction.objects.get().reason == "Moving to a new host"


def test_a_worker_that_does_not_answer_is_told_apart_and_nothing_is_recorded(db):
    now = timezone.now()
    gone = Worker.objects.create(
        name="gone@nowhere", hostname="nowhere", pid=1, started_at=now, last_seen_at=now
    )
    with pytest.raises(CommandRefused, match="did not answer"):
        worker_command(worker=gone, action="grow", by=UserFactory(is_staff=True), reason="x")
    assert not StaffAction.objects.exists()


def test_a_broker_that_does_not_answer_is_said_plainly(db, monkeypatch):
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:9/0")  # nothing listens there
    with pytest.raises(BrokerUnavailable):
        pools_of(["anyone@anywhere"])
    with pytest.raises(BrokerUnavailable):
        worker_command(worker=Worker(name="anyone@anywhere"), action="grow", by=None, reason="x")


def test_worker_commands_are_for_staff_only_by_post_with_the_csrf_token(processes):
    worker = answering(processes.add(WorkerProcess(concurrency=1)))
    row = Worker.objects.get(name=worker.node)
    url = reverse("dashboard:worker_command", args=[row.pk, "grow"])
    data = {"reason": "A busy morning"}
    anonymous = Client().post(url, data)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    user = Client()
    user.force_login(UserFactory())
    assert user.get(url).status_code == 403 and user.post(url, data).status_code == 403
    no_token = Client(enforce_csrf_checks=True)
    no_token.force_login(UserFactory(is_staff=True))
    assert no_token.post(url, data).status_code == 403
    staff = Client()
    staff.force_login(UserFactory(is_staff=True))
    page = staff.get(url)  # the confirmation page, which changes nothing
    assert page.status_code == 200 and b"Grow the pool of" in page.content
    assert not StaffAction.objects.exists()
    assert staff.post(url, {"reason": ""}).status_code == 422  # a reason is asked for
    done = staff.post(url, data)
    assert done.status_code == 302 and done["Location"] == reverse("dashboard:workers")
    assert StaffAction.objects.get().kind == "pool_grow"
    wait_for(lambda: pool_size(worker) == 2, timeout=10, what="a pool of 2")
    listing = staff.get(reverse("dashboard:workers"))
    assert b"2 processes, 0 busy" in listing.content and b"A busy morning" in listing.content

    assert staff.get(reverse("dashboard:worker_command", args=[999_999, "grow"])).status_code == 404
    assert (
        staff.get(reverse("dashboard:worker_command", args=[row.pk, "explode"])).status_code == 404
    )


def test_the_workers_page_says_when_the_broker_does_not_answer(db, client, monkeypatch):
    now = timezone.now()
    worker = Worker.objects.create(
        name="w1@host", hostname="host", pid=1, started_at=now, last_seen_at=now
    )
    client.force_login(UserFactory(is_staff=True))
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:9/0")  # nothing listens there
    page = client.get(reverse("dashboard:workers"))
    assert page.status_code == 200
    assert b"data-broker-down" in page.content and b"does not answer" in page.content
    refused = client.post(
        reverse("dashboard:worker_command", args=[worker.pk, "grow"]), {"reason": "x"}
    )
    assert refused.status_code == 503 and b"does not answer" in refused.content
    assert not StaffAction.objects.exists()
