"""The console's figures are the same on both databases: PostgreSQL computes the reply-time
percentiles itself, other databases read them by offset."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from continuity.models import Message
from dashboard.selectors import reply_figures
from tests.helpers.factories import ConversationFactory, MessageFactory

pytestmark = pytest.mark.django_db


def answered_after(chat, seconds: float, *, ago: timedelta = timedelta(minutes=5)) -> None:
    asked = MessageFactory(conversation=chat, state="done")
    reply = MessageFactory(conversation=chat, role="assistant", state="done", reply_to=asked)
    asked_at = timezone.now() - ago
    Message.objects.filter(pk=asked.pk).update(created_at=asked_at)
    Message.objects.filter(pk=reply.pk).update(created_at=asked_at + timedelta(seconds=seconds))


def test_reply_times_are_interpolated_percentiles_of_the_last_hour():
    chat = ConversationFactory()
    for seconds in (4, 1, 10, 3, 2):
        answered_after(chat, seconds)
    answered_after(chat, 600, ago=timedelta(hours=2))  # answered before the hour began

    figures = reply_figures(within=timedelta(hours=1))

    assert figures.answered == 5
    assert figures.p50 == timedelta(seconds=3)
    # percentile_cont: 0.95 of the way through five values is 0.8 of the way from 4 s to 10 s.
    assert figures.p95 == timedelta(seconds=8.8)


@pytest.mark.parametrize(("delays", "p50"), [((), None), ((7,), timedelta(seconds=7))])
def test_no_reply_or_one_reply(delays, p50):
    chat = ConversationFactory()
    for seconds in delays:
        answered_after(chat, seconds)

    figures = reply_figures()

    assert (figures.answered, figures.p50, figures.p95) == (len(delays), p50, p50)
