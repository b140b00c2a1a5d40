"""A message's timeline: its whole story, in time order, found from its id."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from continuity.models import CrashRecord, Message, Recovery, ReplyChunk, Run
from dashboard.timeline import message_timeline
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


def crashed_twice_then_answered() -> Message:
    chat = ConversationFactory()
    message = MessageFactory(conversation=chat, text="Hello", state="done", attempts=3)
    start = timezone.now() - timedelta(minutes=1)
    Message.objects.filter(pk=message.pk).update(created_at=start)
    message.refresh_from_db()
    runs = []
    for attempt in (1, 2, 3):
        at = start + timedelta(seconds=10 * attempt)
        crashed = attempt < 3
        run = Run.objects.create(
            conversation=chat,
            message=message,
            attempt=attempt,
            state="crashed" if crashed else "completed",
            worker=f"host:{100 + attempt}",
            started_at=at,
            heartbeat_at=at + timedelta(seconds=1),
            ended_at=at + timedelta(seconds=5 if crashed else 2),
            error="Heartbeat stopped" if crashed else "",
        )
        ReplyChunk.objects.create(message=message, run=run, seq=1, text="Hi")
        if crashed:
            CrashRecord.objects.create(
                conversation=chat,
                message=message,
                run=run,
                detected_by="watchdog",
                detected_at=at + timedelta(seconds=5),
            )
        if runs:
            Recovery.objects.create(
                conversation=chat,
                message=message,
                run=run,
                interrupted_run=runs[-1],
                kind="crash",
                interrupted_at=runs[-1].heartbeat_at,
                resumed_at=at,
            )
        runs.append(run)
    Message.objects.create(
        conversation=chat, role="assistant", text="Hi there", state="done", reply_to=message
    )
    return message


def test_the_timeline_tells_the_story_in_order():
    events = message_timeline(crashed_twice_then_answered())
    whats = [event.what for event in events]
    assert whats[0] == "Accepted" and whats[-1] == "Answered"
    assert [event.at for event in events] == sorted(event.at for event in events)
    assert whats.count("Resumed after a crash") == 2
    assert "Attempt 1: last sign of life" in whats
    assert "Attempt 1: crash noticed by the watchdog" in whats
    assert "Attempt 3 completed" in whats
    assert whats.count("1 reply chunk streamed") == 3
    noticed = next(e for e in events if e.what == "Attempt 1: crash noticed by the watchdog")
    died = next(e for e in events if e.what == "Attempt 1: last sign of life")
    assert (noticed.at - died.at) == timedelta(seconds=4)  # the real end, apart from the notice


def test_a_message_id_from_the_users_page_finds_its_timeline(client):
    client.force_login(UserFactory(is_staff=True))
    message = crashed_twice_then_answered()
    found = client.get(reverse("dashboard:message_find"), {"id": f"#exchange-{message.pk}"})
    assert found["Location"] == reverse("dashboard:message_timeline", args=[message.pk])
    missing = client.get(reverse("dashboard:message_find"), {"id": "nope"}, follow=True)
    assert "No message has the id “nope”" in missing.content.decode()
    page = client.get(found["Location"]).content.decode()
    assert page.count("<li data-event=") == len(message_timeline(message))


def test_the_timeline_shows_each_round_and_each_tool_call():
    from continuity.delivery.processing import drain_conversation
    from tests.helpers.messages import send

    chat = ConversationFactory()
    message = send(chat, "What is 6 × 7?")
    drain_conversation(conversation_id=chat.pk)

    events = message_timeline(message)

    whats = [event.what for event in events]
    assert "Round 1: the model asked for calculate" in whats
    assert "Tool call calculate (built-in) started" in whats
    ended = next(e for e in events if e.what.startswith("Tool call calculate (built-in): done"))
    assert ended.detail == "6 × 7 = 42"
    assert whats.index("Round 1: the model asked for calculate") < whats.index("Answered")
