"""The history's five-minute buckets: rolled up once, summed for /metrics and the charts, and
never lowered by retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from continuity.database.clock import database_now
from continuity.delivery.history import (
    Counts,
    bucket_start,
    counts_ever,
    history_record,
    history_spans,
)
from continuity.delivery.retention import history_prune
from continuity.models import Conversation, DeadLetter, HistoryBucket, Message, Run
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


def ago(minutes: float):
    return database_now() - timedelta(minutes=minutes)


def answered(conversation: Conversation, *, minutes_ago: float, took: float) -> Message:
    """A question answered `minutes_ago`, `took` seconds after it was asked."""
    question = MessageFactory(conversation=conversation, state="done")
    reply = MessageFactory(
        conversation=conversation, role="assistant", reply_to=question, state="done"
    )
    replied_at = ago(minutes_ago)
    Message.objects.filter(pk=reply.pk).update(created_at=replied_at)
    Message.objects.filter(pk=question.pk).update(created_at=replied_at - timedelta(seconds=took))
    return question


def ended(message: Message, state: str, *, minutes_ago: float) -> Run:
    run = Run.objects.create(
        conversation=message.conversation, message=message, attempt=1, state=state
    )
    Run.objects.filter(pk=run.pk).update(ended_at=ago(minutes_ago))
    return run


def test_a_reply_quantile_is_read_within_its_bound():
    counts = Counts(answered=4)
    counts.replies_within[0] = 2  # within 0.025 s
    counts.replies_within[8] = 2  # within (0.75, 1] s
    assert counts.reply_quantile(0.5) == pytest.approx(0.025)
    assert counts.reply_quantile(0.75) == pytest.approx(0.875)
    assert Counts().reply_quantile(0.5) is None


def test_finished_buckets_are_rolled_up_once_with_running_totals():
    chat = ConversationFactory()
    fast = answered(chat, minutes_ago=30, took=0.3)
    answered(chat, minutes_ago=30, took=3)
    answered(chat, minutes_ago=20, took=12)
    ended(fast, "crashed", minutes_ago=30)
    ended(fast, "completed", minutes_ago=20)
    ended(fast, "interrupted", minutes_ago=20)
    answered(chat, minutes_ago=0, took=1)  # the current five minutes: not rolled up yet

    assert history_record() > 0
    assert history_record() == 0  # once
    rolled = HistoryBucket.objects.filter(rolled_up=True)
    assert rolled.filter(answered__gt=0).count() == 2
    older, newer = rolled.filter(answered__gt=0).order_by("start")
    assert (older.answered, older.attempts) == (2, {"crashed": 1})
    assert (newer.answered, newer.attempts) == (1, {"completed": 1, "interrupted": 1})
    last = rolled.order_by("-start").first()
    assert Counts.from_json(last.totals).answered == 3
    assert Counts.from_json(last.totals).attempts == {
        "crashed": 1,
        "completed": 1,
        "interrupted": 1,
    }
    assert not rolled.filter(start=bucket_start(database_now())).exists()
    # /metrics' view: the rolled-up totals, without the minutes not rolled up yet.
    ever = counts_ever()
    assert ever.answered == 3 and ever.crashes == 1 and ever.interruptions == 1
    assert ever.reply_seconds == pytest.approx(15.3)


def test_counters_do_not_fall_when_retention_and_deletions_remove_the_rows():
    chat = ConversationFactory()
    message = answered(chat, minutes_ago=30, took=2)
    ended(message, "completed", minutes_ago=30)
    letter = dead_letter_make(chat)
    DeadLetter.objects.filter(pk=letter.pk).update(created_at=ago(30), status="discarded")
    Run.objects.filter(message=letter.message).update(ended_at=ago(30))
    history_record()
    before = counts_ever()
    attempts = {"completed": 1, "failed": 1}
    assert (before.answered, before.attempts, before.dead_letters) == (1, attempts, 1)

    history_prune(older_than_days=0)  # attempts and handled dead letters
    chat.delete()  # the person deleted the conversation: its messages go
    assert not Run.objects.exists() and not DeadLetter.objects.exists()
    assert counts_ever() == before


def test_the_queue_depth_keeps_the_highest_sample_of_its_five_minutes():
    chat = ConversationFactory()
    waiting = MessageFactory.create_batch(3, conversation=chat, state="queued")
    history_record()
    Message.objects.filter(pk__in=[m.pk for m in waiting[:2]]).update(state="done")
    history_record()
    current = HistoryBucket.objects.get(start=bucket_start(database_now()))
    assert current.queue_depth == 3


def test_spans_sum_rolled_up_buckets_and_count_the_last_minutes_from_the_rows():
    chat = ConversationFactory()
    answered(chat, minutes_ago=40, took=1)
    history_record()
    answered(chat, minutes_ago=0, took=2)  # not rolled up: counted from the rows
    now = bucket_start(database_now())
    history = history_spans(start=now - timedelta(hours=1), span=timedelta(hours=1), count=2)
    assert [span.counts.answered for span in history.spans] == [1, 1]
    assert not history.lagging


def test_the_history_page_draws_every_chart_for_both_periods(client):
    chat = ConversationFactory()
    answered(chat, minutes_ago=30, took=1)
    history_record()
    client.force_login(UserFactory(is_staff=True))
    for period in ("24h", "7d"):
        page = client.get(reverse("dashboard:history"), {"range": period})
        assert page.status_code == 200
        for chart in (
            "answered", "latency", "crashes", "recoveries", "interruptions", "dead-letters",
            "queue",
        ):  # fmt: skip
            assert f'data-chart="{chart}"'.encode() in page.content
        assert b"Messages answered</strong>: 1 over the last" in page.content
    assert client.get(reverse("dashboard:history"), {"range": "nonsense"}).status_code == 200
