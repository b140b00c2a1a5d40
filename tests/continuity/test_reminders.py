"""Reminders: the set_reminder tool reads the person's time, the row is the only truth, and
whoever sweeps when it is due delivers it once, as the assistant's message; late, it says so."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse

from continuity.database.clock import database_now
from continuity.delivery import watchdog_tick
from continuity.delivery.processing import drain_conversation
from continuity.models import Conversation, Message, Reminder, ToolCall
from continuity.tools import ToolError
from continuity.tools.builtin import reminder_due
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send

LISBON = ZoneInfo("Europe/Lisbon")
# A Sunday afternoon in Lisbon (UTC+0 in winter): 15:30 there.
NOW = datetime(2026, 11, 29, 15, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("arguments", "local"),
    [
        ({"in_minutes": 10}, "2026-11-29 10:40"),
        ({"at": "17:00"}, "2026-11-29 17:00"),
        ({"at": "09:00"}, "2026-11-30 09:00"),  # passed today: tomorrow's
        ({"at": "tomorrow 9"}, "2026-11-30 09:00"),
        ({"at": "tomorrow at 9:30 pm"}, "2026-11-30 21:30"),
        ({"at": "2026-12-24 18:00"}, "2026-12-24 18:00"),
        ({"at": "2026-12-24T18:00"}, "2026-12-24 18:00"),
    ],
)
def test_the_time_is_read_in_the_persons_own_zone(arguments, local):
    new_york = ZoneInfo("America/New_York")  # 10:30 there, at NOW
    due = reminder_due(arguments, now=NOW, zone=new_york)
    assert due.astimezone(new_york).strftime("%Y-%m-%d %H:%M") == local


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ({"at": "today 08:00"}, "has passed already"),
        ({"at": "2025-01-01 10:00"}, "has passed already"),
        ({"at": "25:00"}, "is not a time of day"),
        ({"at": "soonish"}, "Say when"),
        ({"in_minutes": -5}, "at most a year"),
        ({"at": "2028-01-01 10:00"}, "at most a year ahead"),
    ],
)
def test_a_time_that_cannot_be_meant_says_why(arguments, said):
    with pytest.raises(ToolError, match=said):
        reminder_due(arguments, now=NOW, zone=LISBON)


@pytest.mark.django_db(transaction=True)
def test_remind_me_sets_a_row_that_the_sweep_delivers_once_as_the_assistants_message(client):
    conversation = ConversationFactory(time_zone="Europe/Lisbon")
    message = send(conversation, "Remind me in 10 minutes to stretch")
    drain_conversation(conversation_id=conversation.pk)

    call = ToolCall.objects.get(message=message)
    assert (call.tool, call.state, call.arguments) == (
        "set_reminder", "done", {"text": "stretch", "in_minutes": 10}
    )  # fmt: skip
    reminder = Reminder.objects.get()
    assert (reminder.text, reminder.time_zone, reminder.state) == (
        "stretch", "Europe/Lisbon", "scheduled"
    )  # fmt: skip
    reply = Message.objects.get(reply_to=message).text
    assert reply.startswith("I'll remind you on ") and "(Europe/Lisbon): stretch." in reply
    watchdog_tick()
    assert Reminder.objects.get().state == "scheduled"  # not due yet

    Reminder.objects.update(due_at=database_now())
    watchdog_tick()
    watchdog_tick()

    reminder.refresh_from_db()
    delivered = Message.objects.get(pk=reminder.message_id)
    assert reminder.state == "delivered" and delivered.role == "assistant"
    assert delivered.text == "Reminder: stretch" and delivered.reply_to_id is None
    assert Message.objects.filter(conversation=conversation, role="assistant").count() == 2
    assert Conversation.objects.get(pk=conversation.pk).unread_at is not None

    client.force_login(conversation.owner)
    other = ConversationFactory(owner=conversation.owner)
    sidebar = client.get(reverse("chat:conversation", args=[other.pk])).content.decode()
    assert "data-unread" in sidebar
    page = client.get(reverse("chat:conversation", args=[conversation.pk])).content.decode()
    assert "data-reminder" in page and "Reminder: stretch" in page
    assert Conversation.objects.get(pk=conversation.pk).unread_at is None  # read now


@pytest.mark.django_db(transaction=True)
def test_a_reminder_delivered_long_after_its_time_says_it_is_late(settings):
    conversation = ConversationFactory()
    reminder = Reminder.objects.create(
        owner=conversation.owner, conversation=conversation, text="call Ada",
        due_at=database_now() - timedelta(hours=2), time_zone="Europe/Lisbon",
    )  # fmt: skip

    watchdog_tick()

    text = Message.objects.get(pk=Reminder.objects.get(pk=reminder.pk).message_id).text
    assert text.startswith("Reminder: call Ada\n\n(Late: this was due ")
    assert "(Europe/Lisbon), and the service was not running then.)" in text


@pytest.mark.django_db
def test_the_person_sees_their_reminders_in_their_time_and_cancels_one(client):
    conversation = ConversationFactory(title="Plants")
    soon = Reminder.objects.create(
        owner=conversation.owner, conversation=conversation, text="water the plants",
        due_at=datetime(2030, 6, 1, 17, 0, tzinfo=UTC), time_zone="Europe/Lisbon",
    )  # fmt: skip
    client.force_login(conversation.owner)

    page = client.get(reverse("chat:memory")).content.decode()
    assert "Sat 1 Jun 2030, 18:00 (Europe/Lisbon)" in page and "water the plants" in page

    cancelled = client.post(reverse("chat:reminder_cancel", args=[soon.pk]), follow=True)
    assert "Reminder cancelled." in cancelled.content.decode()
    assert Reminder.objects.get(pk=soon.pk).state == "cancelled"
    Reminder.objects.filter(pk=soon.pk).update(due_at=database_now())
    watchdog_tick()
    assert not Message.objects.filter(conversation=conversation).exists()

    client.force_login(ConversationFactory().owner)
    assert client.post(reverse("chat:reminder_cancel", args=[soon.pk])).status_code == 404
