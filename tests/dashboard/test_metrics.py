from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import DateTimeField, ExpressionWrapper
from django.db.models.functions import Now
from django.urls import reverse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from continuity.database.clock import database_now
from continuity.delivery.history import history_record
from continuity.models import Conversation, DeadLetter, Message, Run, Worker
from tests.helpers.factories import ConversationFactory, MessageFactory

pytestmark = pytest.mark.django_db

TOKEN = "s3cret-metrics-token"


@pytest.fixture
def url() -> str:
    return reverse("metrics")


@pytest.fixture
def token(settings) -> str:
    settings.CONTINUITY_METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(client, url: str) -> dict[tuple, float]:
    response = client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return {
        (sample.name, *sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def test_anonymous_gets_401(client, url, token):
    response = client.get(url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_wrong_token_gets_401(client, url, token):
    response = client.get(url, headers={"Authorization": "Bearer not-the-token"})
    assert response.status_code == 401
    assert 'error="invalid_token"' in response["WWW-Authenticate"]


def test_non_ascii_token_gets_401(client, url, token):
    response = client.get(url, headers={"Authorization": "Bearer sécret"})
    assert response.status_code == 401


def test_token_path_is_off_when_the_setting_is_empty(client, url, settings):
    settings.CONTINUITY_METRICS_TOKEN = ""
    response = client.get(url, headers={"Authorization": "Bearer "})
    assert response.status_code == 401


def test_ordinary_user_gets_403(client, url, user, token):
    client.force_login(user)
    assert client.get(url).status_code == 403


def test_staff_gets_metrics(client, url, staff_user):
    client.force_login(staff_user)
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert "no-store" in response["Cache-Control"]
    assert "# HELP continuity_queue_depth " in response.content.decode()


def test_token_gets_metrics(client, url, token):
    response = client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST


def test_post_gets_405(client, url, staff_user):
    client.force_login(staff_user)
    assert client.post(url).status_code == 405


def test_every_series_is_present_when_the_database_is_empty(client, url, token):
    values = scrape(client, url)
    for state in Message.State.values:
        assert values["continuity_messages", ("state", state)] == 0
    for outcome in ["ended", "completed", "crashed", "failed", "interrupted"]:
        assert values["continuity_attempts_total", ("outcome", outcome)] == 0
    for status in DeadLetter.Status.values:
        assert values["continuity_dead_letters", ("status", status)] == 0
    assert values["continuity_oldest_waiting_message_age_seconds",] == 0
    assert values["continuity_reply_seconds_count",] == 0


def test_a_scrape_is_a_handful_of_queries(client, url, token, django_assert_max_num_queries):
    # Whatever the rows: the counters are one bucket of the history.
    with django_assert_max_num_queries(7):
        client.get(url, headers={"Authorization": f"Bearer {TOKEN}"})


def db_seconds_ago(seconds: float) -> ExpressionWrapper:
    return ExpressionWrapper(Now() - timedelta(seconds=seconds), output_field=DateTimeField())


def answered(conversation: Conversation, *, after: timedelta) -> Message:
    question = MessageFactory(conversation=conversation, state="done")
    reply = MessageFactory(
        conversation=conversation, role="assistant", reply_to=question, state="done"
    )
    asked_at = database_now() - timedelta(minutes=30)  # long enough ago to be rolled up
    Message.objects.filter(pk=question.pk).update(created_at=asked_at)
    Message.objects.filter(pk=reply.pk).update(created_at=asked_at + after)
    return question


def run(message: Message, state: str) -> Run:
    run = Run.objects.create(
        conversation=message.conversation,
        message=message,
        attempt=1,
        state=state,
        heartbeat_at=timezone.now(),
    )
    if state != "running":
        Run.objects.filter(pk=run.pk).update(ended_at=database_now() - timedelta(minutes=20))
    return run


def dead_letter(message: Message, status: str) -> DeadLetter:
    return DeadLetter.objects.create(
        message=message,
        conversation=message.conversation,
        owner=message.conversation.owner,
        payload={"text": message.text},
        reason="test",
        status=status,
    )


def worker(name: str, *, last_seen_at, stopped_at=None) -> Worker:
    return Worker.objects.create(
        name=name,
        hostname="host",
        pid=1,
        started_at=timezone.now(),
        last_seen_at=last_seen_at,
        stopped_at=stopped_at,
    )


def test_series_match_the_database(client, url, token):
    conversation = ConversationFactory()
    ConversationFactory(state=Conversation.State.PAUSED)
    oldest = MessageFactory(conversation=conversation, state="queued")
    Message.objects.filter(pk=oldest.pk).update(created_at=db_seconds_ago(120))
    MessageFactory(conversation=conversation, state="queued")
    processing = MessageFactory(conversation=conversation, state="processing")
    dead = MessageFactory.create_batch(2, conversation=conversation, state="dead")
    fast = answered(conversation, after=timedelta(seconds=0.3))
    answered(conversation, after=timedelta(seconds=3))
    answered(conversation, after=timedelta(seconds=400))
    run(processing, "running")
    for state in ["completed", "completed", "crashed", "failed", "interrupted"]:
        run(fast, state)
    dead_letter(dead[0], "pending")
    dead_letter(dead[1], "retried")
    now = timezone.now()
    worker("live@host", last_seen_at=now)
    worker("stale@host", last_seen_at=now - timedelta(seconds=60))
    worker("stopped@host", last_seen_at=now, stopped_at=now)

    history_record()  # the watchdog's roll-up, which the counters come from
    values = scrape(client, url)

    messages = {"queued": 2, "processing": 1, "done": 3, "dead": 2}
    for state, count in messages.items():
        assert values["continuity_messages", ("state", state)] == count
    attempts = {"ended": 5, "completed": 2, "crashed": 1, "failed": 1, "interrupted": 1}
    for outcome, count in attempts.items():
        assert values["continuity_attempts_total", ("outcome", outcome)] == count
    dead_letters = {"pending": 1, "retried": 1, "discarded": 0}
    for status, count in dead_letters.items():
        assert values["continuity_dead_letters", ("status", status)] == count
    assert values["continuity_conversations_paused",] == 1
    assert values["continuity_queue_depth",] == 3
    assert 120 <= values["continuity_oldest_waiting_message_age_seconds",] < 130
    assert values["continuity_workers_live",] == 1
    buckets = {"0.25": 0, "0.5": 1, "2.5": 1, "5.0": 2, "300.0": 2, "+Inf": 3}
    for bound, count in buckets.items():
        assert values["continuity_reply_seconds_bucket", ("le", bound)] == count
    assert values["continuity_reply_seconds_count",] == 3
    assert values["continuity_reply_seconds_sum",] == pytest.approx(403.3)


def test_a_reply_stamped_before_its_question_counts_as_zero(client, url, token):
    answered(ConversationFactory(), after=timedelta(seconds=-2))
    history_record()  # the watchdog's roll-up, which the counters come from
    values = scrape(client, url)
    assert values["continuity_reply_seconds_bucket", ("le", "0.05")] == 1
    assert values["continuity_reply_seconds_sum",] == 0


def ended_call(message: Message, position: int, *, tool: str, state: str, seconds: float, **fields):
    """A tool call that ended 20 minutes ago (rolled up), having run `seconds`."""
    from continuity.models import ToolCall

    ended = database_now() - timedelta(minutes=20)
    return ToolCall.objects.create(
        message=message, round=1, position=position, call_id=f"c{position}", tool=tool,
        source=fields.pop("source", "ledger"), state=state,
        started_at=ended - timedelta(seconds=seconds), ended_at=ended, **fields,
    )  # fmt: skip


def asked_long_ago() -> Message:
    """A message whose minutes the history rolls up (it begins at the oldest message)."""
    message = MessageFactory(conversation=ConversationFactory(), state="done")
    Message.objects.filter(pk=message.pk).update(created_at=database_now() - timedelta(minutes=30))
    return message


def test_tool_calls_are_counted_by_tool_and_outcome_from_the_history(client, url, token):
    message = asked_long_ago()
    ended_call(message, 0, tool="ledger_append", state="done", seconds=0.2)
    ended_call(message, 1, tool="ledger_append", state="done", seconds=3)
    ended_call(message, 2, tool="ledger_append", state="error", seconds=61, timed_out=True)
    ended_call(message, 3, tool="ledger_append", state="denied", seconds=0)
    ended_call(message, 4, tool="lookup", state="error", seconds=0.05)
    ended_call(message, 5, tool="made-up words", state="error", seconds=0, source="")

    history_record()
    values = scrape(client, url)

    def calls(tool: str, outcome: str) -> float:
        return values["continuity_tool_calls_total", ("outcome", outcome), ("tool", tool)]

    assert calls("ledger_append", "done") == 2
    assert calls("ledger_append", "timeout") == 1 and calls("ledger_append", "error") == 0
    assert calls("ledger_append", "denied") == 1 and calls("lookup", "error") == 1
    assert calls("(unknown)", "error") == 1  # a name the model made up is never a label
    assert (
        "continuity_tool_calls_total",
        ("outcome", "error"),
        ("tool", "made-up words"),
    ) not in values
    # Those that ran to their end: the denied call never ran.
    seconds = {"0.25": 1, "2.5": 1, "5.0": 2, "60.0": 2, "120.0": 3, "+Inf": 3}
    for bound, count in seconds.items():
        key = ("continuity_tool_call_seconds_bucket", ("le", bound), ("tool", "ledger_append"))
        assert values[key] == count
    assert values["continuity_tool_call_seconds_count", ("tool", "ledger_append")] == 3
    assert values["continuity_tool_call_seconds_sum", ("tool", "ledger_append")] == pytest.approx(
        64.2
    )


def test_tool_counters_never_fall_when_the_calls_are_deleted(client, url, token):
    message = asked_long_ago()
    ended_call(message, 0, tool="lookup", state="done", seconds=1)
    history_record()

    message.conversation.delete()
    history_record()

    values = scrape(client, url)
    assert values["continuity_tool_calls_total", ("outcome", "done"), ("tool", "lookup")] == 1
