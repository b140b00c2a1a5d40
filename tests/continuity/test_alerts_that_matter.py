"""Alerts for what matters (#46 item 10). No live worker while messages wait: the watchdog
raises one alert, the overview says it at its top, the person's page says that no assistant
runs, and a worker that beats again clears it. A dead letter raises one, cleared when staff
deal with it; a burst of crashes one, cleared when it calms."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from continuity.actions import dead_letter_discard
from continuity.delivery import crash_burst_check, workers_check
from continuity.delivery.dead_letters import dead_letter_create
from continuity.models import Alert, Conversation, CrashRecord, Message, Run, Worker
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(settings):
    settings.CONTINUITY_NO_WORKER_ALERT_SECONDS = 5
    conversation = ConversationFactory()
    message = MessageFactory(conversation=conversation, text="Anyone there?")
    Message.objects.filter(pk=message.pk).update(created_at=timezone.now() - timedelta(seconds=8))
    return conversation


def worker(*, seen_ago: float) -> Worker:
    now = timezone.now()
    return Worker.objects.create(
        name=f"w{Worker.objects.count()}@host", hostname="host", pid=1, started_at=now,
        last_seen_at=now - timedelta(seconds=seen_ago),
    )  # fmt: skip


def open_alerts():
    return Alert.objects.filter(kind="no_worker", acknowledged_at=None)


def test_no_live_worker_while_a_message_waits_raises_one_alert_until_one_beats(waiting):
    worker(seen_ago=600)  # stopped heartbeating long ago
    assert workers_check() is False
    assert workers_check() is False  # the next sweep: still one
    (alert,) = open_alerts()
    assert "No worker is running, and 1 message waits" in alert.text

    worker(seen_ago=0)
    assert workers_check() is True
    assert not open_alerts().exists()
    alert.refresh_from_db()
    assert alert.acknowledged_at is not None  # cleared by itself


def test_a_message_that_just_arrived_is_no_outage(waiting, settings):
    settings.CONTINUITY_NO_WORKER_ALERT_SECONDS = 60  # a restart takes seconds
    assert workers_check() is False
    assert not open_alerts().exists()


def test_a_paused_conversation_waits_for_staff_not_a_worker(waiting):
    Conversation.objects.filter(pk=waiting.pk).update(state="paused")
    workers_check()
    assert not open_alerts().exists()


def test_the_person_and_staff_are_told(waiting, client):
    workers_check()
    person = Client()
    person.force_login(waiting.owner)
    page = person.get(reverse("chat:conversation", args=[waiting.pk])).content.decode()
    assert "No assistant is running right now." in page
    assert "Your message is saved and will be answered when one starts." in page

    client.force_login(UserFactory(is_staff=True))
    overview = client.get(reverse("dashboard:index")).content.decode()
    assert "data-no-worker-alert" in overview and "No worker is running." in overview

    worker(seen_ago=0)
    workers_check()
    page = person.get(reverse("chat:conversation", args=[waiting.pk])).content.decode()
    assert "No assistant is running right now." not in page


def test_a_dead_letter_raises_one_alert_that_clears_when_staff_deal_with_it():
    message = MessageFactory(conversation=ConversationFactory(), text="Boom")
    dead_letter = dead_letter_create(message=message, reason="3 crashes")
    (alert,) = Alert.objects.filter(kind="dead_letter", acknowledged_at=None)
    assert alert.dead_letter == dead_letter and f"Message {message.pk}" in alert.text

    staff = UserFactory(is_staff=True)
    dead_letter_discard(dead_letter=dead_letter, by=staff, reason="spam")
    alert.refresh_from_db()
    assert alert.acknowledged_at is not None and alert.acknowledged_by == staff


def test_a_burst_of_crashes_raises_one_alert_that_clears_when_it_calms(settings):
    settings.CONTINUITY_CRASH_BURST, settings.CONTINUITY_CRASH_BURST_SECONDS = 3, 300
    conversation = ConversationFactory()
    for attempt in range(1, 4):
        message = MessageFactory(conversation=conversation)
        run = Run.objects.create(
            conversation=conversation, message=message, attempt=attempt, state="crashed",
            heartbeat_at=timezone.now(),
        )  # fmt: skip
        CrashRecord.objects.create(
            conversation=conversation, message=message, run=run, detected_by="watchdog"
        )
    assert crash_burst_check() == 3
    assert crash_burst_check() == 3  # the next sweep: still one alert
    (alert,) = Alert.objects.filter(kind="crash_burst", acknowledged_at=None)
    assert alert.text.startswith("3 attempts crashed within 300 s")

    CrashRecord.objects.update(detected_at=timezone.now() - timedelta(seconds=600))
    assert crash_burst_check() == 0
    assert not Alert.objects.filter(kind="crash_burst", acknowledged_at=None).exists()
