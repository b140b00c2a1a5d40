"""*Retry now* only cuts a backoff short, within the crash-loop rules, and only for the owner."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from continuity.actions import conversation_retry_now
from continuity.errors import InvalidTransition
from continuity.models import Conversation, Run
from continuity.selectors import backoff_of
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.fixture
def backing_off(conversation):
    """A conversation whose message was interrupted once and now waits a minute to retry."""
    message = MessageFactory(conversation=conversation, attempts=1)
    Run.objects.create(
        conversation=conversation,
        message=message,
        attempt=1,
        state=Run.State.CRASHED,
        heartbeat_at=timezone.now(),
        ended_at=timezone.now(),
    )
    Conversation.objects.filter(pk=conversation.pk).update(
        retry_at=timezone.now() + timedelta(seconds=60)
    )
    conversation.refresh_from_db()
    return conversation


def test_the_wait_is_shown_in_seconds(backing_off):
    assert 58 <= backoff_of(conversation=backing_off).seconds <= 60


@pytest.mark.django_db(transaction=True)  # what it sends goes on commit
def test_retry_now_ends_the_backoff_and_enqueues(backing_off):
    before = timezone.now()
    conversation_retry_now(conversation=backing_off)
    backing_off.refresh_from_db()
    assert backing_off.retry_at <= timezone.now()
    assert backing_off.enqueued_at >= before - timedelta(seconds=5)
    assert backoff_of(conversation=backing_off) is None


def test_a_paused_conversation_is_not_retried(backing_off):
    Conversation.objects.filter(pk=backing_off.pk).update(state=Conversation.State.PAUSED)
    retry_at = Conversation.objects.get(pk=backing_off.pk).retry_at
    with pytest.raises(InvalidTransition):
        conversation_retry_now(conversation=backing_off)
    assert Conversation.objects.get(pk=backing_off.pk).retry_at == retry_at
    assert backoff_of(conversation=Conversation.objects.get(pk=backing_off.pk)) is None


def test_nothing_is_retried_while_an_attempt_runs(backing_off):
    message = backing_off.messages.get()
    Run.objects.create(
        conversation=backing_off, message=message, attempt=2, heartbeat_at=timezone.now()
    )
    retry_at = backing_off.retry_at
    with pytest.raises(InvalidTransition):
        conversation_retry_now(conversation=backing_off)
    assert Conversation.objects.get(pk=backing_off.pk).retry_at == retry_at
    assert backoff_of(conversation=backing_off) is None


def test_without_a_backoff_there_is_nothing_to_retry(conversation):
    MessageFactory(conversation=conversation, attempts=1)
    with pytest.raises(InvalidTransition):
        conversation_retry_now(conversation=conversation)
    assert backoff_of(conversation=conversation) is None


@pytest.mark.parametrize(
    ("who", "expected"),
    [("anonymous", 302), ("owner", 302), ("other user", 404), ("staff", 404)],
)
def test_retry_now_view_is_for_the_owner(client, backing_off, who, expected):
    users = {"owner": backing_off.owner, "other user": UserFactory()}
    users["staff"] = UserFactory(is_staff=True)
    if who != "anonymous":
        client.force_login(users[who])
    response = client.post(reverse("chat:retry_now", args=[backing_off.pk]))
    assert response.status_code == expected
    backing_off_still = Conversation.objects.get(pk=backing_off.pk).retry_at > timezone.now()
    assert backing_off_still is (who != "owner")


def test_retry_now_refuses_get(owner_client, backing_off):
    assert owner_client.get(reverse("chat:retry_now", args=[backing_off.pk])).status_code == 405


def test_htmx_retry_now_returns_the_status_and_409_once_refused(owner_client, backing_off):
    url = reverse("chat:retry_now", args=[backing_off.pk])
    page = owner_client.get(reverse("chat:conversation", args=[backing_off.pk])).content.decode()
    assert "data-countdown" in page and "Retry now" in page
    response = owner_client.post(url, headers=HTMX)
    assert response.status_code == 200
    assert 'id="conversation-status"' in response.content.decode()
    assert "Retry now" not in response.content.decode()
    assert owner_client.post(url, headers=HTMX).status_code == 409


def test_a_paused_conversation_shows_the_pause_next_to_the_composer(owner_client, backing_off):
    Conversation.objects.filter(pk=backing_off.pk).update(state=Conversation.State.PAUSED)
    html = owner_client.get(reverse("chat:conversation", args=[backing_off.pk])).content.decode()
    dock = html[html.index('class="composer-dock"') :]
    assert dock.index("data-paused") < dock.index('id="composer"')
    assert "try again shortly" not in html
    assert "Retry now" not in html


def test_another_owners_conversation_is_untouched(client):
    other = ConversationFactory()
    client.force_login(UserFactory())
    assert client.post(reverse("chat:retry_now", args=[other.pk])).status_code == 404
