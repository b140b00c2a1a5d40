"""The console says one thing one way (#46 item 8): who noticed a crash, whether it was dealt
with, counts in words, who paused, the assistant's Markdown, and the admin's read-only history."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from continuity.models import Conversation, CrashRecord, Handoff, Message, Run
from dashboard.timeline import message_timeline
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    client.force_login(UserFactory(is_staff=True, is_superuser=True, username="opal"))
    return client


def crashed_then_answered(detected_by: str) -> Message:
    chat = ConversationFactory()
    message = MessageFactory(conversation=chat, state="done", attempts=1)
    run = Run.objects.create(
        conversation=chat, message=message, attempt=1, state="crashed",
        heartbeat_at=timezone.now(), ended_at=timezone.now(),
    )  # fmt: skip
    CrashRecord.objects.create(conversation=chat, message=message, run=run, detected_by=detected_by)
    Message.objects.create(
        conversation=chat, role="assistant", text="A **bold** answer", state="done",
        reply_to=message,
    )  # fmt: skip
    return message


def test_who_noticed_a_crash_is_said_the_same_way_everywhere(staff):
    message = crashed_then_answered("pool")
    whats = [event.what for event in message_timeline(message)]
    assert "Attempt 1: crash noticed by its worker, when the pool process died" in whats
    assert not any("the its" in what for what in whats)
    crashes = staff.get(reverse("dashboard:crashes")).content.decode()
    assert "Its worker, when the pool process died" in crashes


def test_a_crash_whose_message_was_then_answered_is_not_unresolved(staff):
    crashed_then_answered("watchdog")
    crashes = staff.get(reverse("dashboard:crashes")).content.decode()
    assert "answered after it" in crashes and "<td>no</td>" not in crashes


def test_the_paused_page_does_not_blame_the_breaker_for_a_staff_pause(staff):
    Conversation.objects.filter(pk=ConversationFactory().pk).update(
        state="paused", paused_reason="Paused by opal: checking a complaint"
    )
    page = staff.get(reverse("dashboard:paused")).content.decode()
    assert "or by staff" in page


def test_the_console_thread_shows_the_assistants_markdown_rendered(staff):
    message = crashed_then_answered("watchdog")
    Conversation.objects.filter(pk=message.conversation_id).update(
        state="taken_over", taken_over_by=UserFactory(is_staff=True)
    )
    page = staff.get(
        reverse("dashboard:conversation", args=[message.conversation_id])
    ).content.decode()
    assert "<strong>bold</strong>" in page and "**bold**" not in page


def test_the_admin_says_nothing_is_waited_for_and_offers_no_delete_on_a_handoff(staff):
    conversation = ConversationFactory()
    handoff = Handoff.objects.create(conversation=conversation, version=1, reason="planned")
    page = staff.get(
        reverse("admin:continuity_conversation_change", args=[conversation.pk])
    ).content.decode()
    assert "Nothing: no backoff is set" in page
    assert "A failed or crashed attempt" not in page
    page = staff.get(reverse("admin:continuity_handoff_change", args=[handoff.pk])).content.decode()
    assert reverse("admin:continuity_handoff_delete", args=[handoff.pk]) not in page
