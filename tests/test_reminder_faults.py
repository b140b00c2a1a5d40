"""Reminders across real process deaths: the row in PostgreSQL is the only truth, so killing
the worker, the watchdog and Redis (which keeps nothing: persistence off) loses no reminder,
and one due while nothing ran arrives once something runs again, late, and says so."""

from __future__ import annotations

import pytest

from continuity.database.clock import database_now
from continuity.models import Message, Reminder
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send
from tests.helpers.processes import WatchdogProcess, WorkerProcess
from tests.helpers.promise import wait_finished
from tests.helpers.redis_server import session_redis_server
from tests.helpers.waiting import wait_for

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]


def reminder_set(text: str) -> Reminder:
    conversation = ConversationFactory()
    message = send(conversation, text)
    wait_finished([message])
    return Reminder.objects.get(conversation=conversation)


def delivered(reminder: Reminder) -> Message:
    wait_for(
        lambda: Reminder.objects.filter(pk=reminder.pk, state="delivered").exists(),
        timeout=60,
        what="the reminder to be delivered",
    )
    said = Message.objects.filter(conversation_id=reminder.conversation_id, reply_to=None)
    [message] = said.filter(role="assistant")
    return message


def test_a_reminder_outlives_kills_of_the_worker_the_watchdog_and_redis(processes):
    worker = processes.add(WorkerProcess())
    watchdog = processes.add(WatchdogProcess())
    reminder = reminder_set("Remind me in 15 seconds to stretch")

    worker.kill_all()
    watchdog.kill_all()
    redis_server = session_redis_server()
    redis_server.stop()
    redis_server.start()
    processes.add(WorkerProcess())
    processes.add(WatchdogProcess())

    message = delivered(reminder)
    assert message.text == "Reminder: stretch"  # on time: not late
    assert Message.objects.get(pk=message.pk).created_at >= reminder.due_at


def test_a_reminder_due_while_nothing_ran_arrives_once_when_something_does_marked_late(
    processes,
):
    late_after = {"CONTINUITY_REMINDER_LATE_SECONDS": "1"}
    worker = processes.add(WorkerProcess(**late_after))
    reminder = reminder_set("Remind me in 2 seconds to call Ada")
    worker.kill_all()
    wait_for(
        lambda: (database_now() - reminder.due_at).total_seconds() > 3,
        timeout=20,
        what="the reminder's time to pass with nothing running",
        every=0.2,
    )
    assert Reminder.objects.get(pk=reminder.pk).state == "scheduled"

    processes.add(WorkerProcess(**late_after))  # its start-up sweep delivers it

    message = delivered(reminder)
    assert message.text.startswith("Reminder: call Ada\n\n(Late: this was due ")
