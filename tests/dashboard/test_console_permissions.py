"""Every console page and action, for each kind of visitor: anonymous, ordinary user, staff."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from continuity.delivery.attempts.lease import attempt_begin
from continuity.models import Alert, Conversation, DeadLetter, Message, Run, StaffAction
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db

PAGES = [
    ("dashboard:index", None),
    ("dashboard:dead_letters", None),
    ("dashboard:dead_letter", "dead_letter"),
    ("dashboard:crashes", None),
    ("dashboard:paused", None),
    ("dashboard:waiting", None),
    ("dashboard:workers", None),
    ("dashboard:history", None),
    ("dashboard:run_stop", "run"),
    ("dashboard:message_timeline", "message"),
    ("dashboard:conversation", "conversation"),
    ("dashboard:alerts", None),
]
ACTIONS = [
    ("dashboard:dead_letter_retry", "dead_letter", {"reason": "fixed"}),
    ("dashboard:dead_letter_edit", "dead_letter", {"text": "Please summarize", "reason": "typo"}),
    ("dashboard:dead_letter_discard", "dead_letter", {"reason": "spam"}),
    ("dashboard:dead_letters_bulk", None, {"action": "retry", "confirmed": "on"}),
    ("dashboard:conversation_resume", "conversation", {"reason": "fixed"}),
    ("dashboard:alert_acknowledge", "alert", {"reason": "seen"}),
    ("dashboard:conversation_retry_now", "waiting", {"retry-{pk}-reason": "model fixed"}),
    ("dashboard:conversation_pause", "waiting", {"pause-{pk}-reason": "looks abusive"}),
]


@pytest.fixture
def world():
    conversation = ConversationFactory()
    dead_letter = dead_letter_make(conversation)
    Conversation.objects.filter(pk=conversation.pk).update(state="paused")
    alert = Alert.objects.create(kind="conversation_paused", conversation=conversation, text="x")
    waiting = ConversationFactory()  # a message waits out a backoff
    MessageFactory(conversation=waiting, attempts=1)
    Conversation.objects.filter(pk=waiting.pk).update(
        retry_at=timezone.now() + timedelta(seconds=90)
    )
    answering = ConversationFactory()  # a reply is being written
    MessageFactory(conversation=answering)
    run = attempt_begin(conversation_id=answering.pk)
    return {
        "conversation": conversation,
        "dead_letter": dead_letter,
        "alert": alert,
        "waiting": waiting,
        "run": run,
        "message": dead_letter.message,
    }


def url_of(name, target, world):
    return reverse(name, args=[world[target].pk]) if target else reverse(name)


def client_of(who) -> Client:
    client = Client()
    if who != "anonymous":
        client.force_login(UserFactory(is_staff=who == "staff"))
    return client


def nothing_changed(world) -> bool:
    waiting = Conversation.objects.get(pk=world["waiting"].pk)
    return (
        not StaffAction.objects.exists()
        and DeadLetter.objects.get().status == "pending"
        and Conversation.objects.get(pk=world["conversation"].pk).state == "paused"
        and not Alert.objects.filter(acknowledged_at__isnull=False).exists()
        and waiting.state == "active"
        and waiting.retry_at > timezone.now()
        and Run.objects.get(pk=world["run"].pk).state == "running"
    )


@pytest.mark.parametrize(("name", "target"), PAGES)
def test_pages_are_for_staff_only(world, name, target):
    url = url_of(name, target, world)
    anonymous = client_of("anonymous").get(url)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    refused = client_of("user").get(url)
    assert refused.status_code == 403
    assert b"data-forbidden" in refused.content and b"staff console is for staff" in refused.content
    assert client_of("staff").get(url).status_code == 200


@pytest.mark.parametrize(("name", "target", "data"), ACTIONS)
def test_actions_are_for_staff_only_and_only_by_post(world, name, target, data):
    url = url_of(name, target, world)
    data = {key.format(pk=world[target].pk if target else ""): v for key, v in data.items()}
    if name == "dashboard:dead_letters_bulk":
        data = {**data, "ids": [world["dead_letter"].pk]}
    anonymous = client_of("anonymous").post(url, data)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    assert client_of("user").post(url, data).status_code == 403
    staff = client_of("staff")
    assert staff.get(url, data).status_code == 405
    assert nothing_changed(world)
    assert staff.post(url, data).status_code == 302
    assert StaffAction.objects.count() == 1


@pytest.mark.parametrize(("name", "target", "data"), ACTIONS)
def test_actions_refuse_a_post_without_the_csrf_token(world, name, target, data):
    client = Client(enforce_csrf_checks=True)
    client.force_login(UserFactory(is_staff=True))
    data = {key.format(pk=world[target].pk if target else ""): v for key, v in data.items()}
    assert client.post(url_of(name, target, world), data).status_code == 403
    assert nothing_changed(world)


def test_unknown_ids_are_404_for_staff(world):
    staff = client_of("staff")
    assert staff.get(reverse("dashboard:dead_letter", args=[999_999])).status_code == 404
    assert staff.post(reverse("dashboard:dead_letter_retry", args=[999_999])).status_code == 404
    assert staff.get(reverse("dashboard:conversation", args=[999_999])).status_code == 404
    assert staff.post(reverse("dashboard:alert_acknowledge", args=[999_999])).status_code == 404
    for action in ("dashboard:conversation_retry_now", "dashboard:conversation_pause"):
        assert staff.post(reverse(action, args=[999_999])).status_code == 404


def test_stopping_a_run_is_for_staff_only_by_post_with_the_csrf_token(world):
    url = reverse("dashboard:run_stop", args=[world["run"].pk])
    data = {"reason": "a runaway reply"}
    anonymous = client_of("anonymous").post(url, data)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith(reverse("login"))
    assert client_of("user").post(url, data).status_code == 403
    no_token = Client(enforce_csrf_checks=True)
    no_token.force_login(UserFactory(is_staff=True))
    assert no_token.post(url, data).status_code == 403
    staff = client_of("staff")
    assert staff.get(url).status_code == 200  # the confirmation page, which changes nothing
    assert nothing_changed(world)
    assert staff.post(url, data).status_code == 302
    action = StaffAction.objects.get()
    assert (action.kind, action.reason) == ("stop", "a runaway reply")
    assert Run.objects.get(pk=world["run"].pk).state == "stopped"
    reply = Message.objects.get(reply_to=world["run"].message_id)
    assert reply.stopped and reply.stopped_by_staff
    assert staff.post(reverse("dashboard:run_stop", args=[999_999]), data).status_code == 404
