"""The console's Tools page: per tool its calls, how they ended and how long they ran, over
the last 24 hours or 7 days, the most used first; the last failures link to their timelines."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from continuity.database.clock import database_now
from continuity.models import ToolCall
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    client.force_login(UserFactory(is_staff=True))
    return client


def call(
    message, position: int, *, tool: str, state: str, seconds: float, ago: timedelta, **fields
):
    created = database_now() - ago
    made = ToolCall.objects.create(
        message=message, round=1, position=position, call_id=f"c{position}", tool=tool,
        source="ledger", state=state, **fields,
    )  # fmt: skip
    ToolCall.objects.filter(pk=made.pk).update(
        created_at=created, started_at=created, ended_at=created + timedelta(seconds=seconds)
    )
    return made


def row_of(html: str, tool: str) -> str:
    return re.search(rf'<tr data-tool="{tool}">(.*?)</tr>', html, re.S).group(1)


def cell(row: str, name: str) -> str:
    return re.search(rf"<td data-{name}>(\d+)</td>", row).group(1)


def test_each_tool_says_its_calls_outcomes_and_times_most_used_first(staff):
    message = MessageFactory(conversation=ConversationFactory(title="Rent"), state="done")
    hour = timedelta(hours=1)
    call(message, 0, tool="ledger_append", state="done", seconds=1, ago=hour)
    call(message, 1, tool="ledger_append", state="done", seconds=3, ago=hour)
    timeout = call(
        message, 2, tool="ledger_append", state="error", seconds=60, ago=hour, timed_out=True,
        result="The tool did not answer within its time limit",
    )  # fmt: skip
    call(message, 3, tool="ledger_append", state="skipped", seconds=0, ago=hour, decision="skip")
    call(message, 4, tool="ledger_append", state="expired", seconds=0, ago=hour)
    call(message, 5, tool="lookup", state="done", seconds=0.5, ago=hour)
    old = call(message, 6, tool="lookup", state="error", seconds=1, ago=timedelta(days=3))

    html = staff.get(reverse("dashboard:tools")).content.decode()

    ledger = row_of(html, "ledger_append")
    assert cell(ledger, "calls") == "5" and cell(ledger, "errors") == "0"
    assert cell(ledger, "timeouts") == "1" and cell(ledger, "in-doubt") == "1"
    assert cell(ledger, "denied") == "1"
    assert "3.00 s" in ledger and "60.00 s" in ledger  # p50, p95
    assert html.index('data-tool="ledger_append"') < html.index('data-tool="lookup"')
    assert cell(row_of(html, "lookup"), "calls") == "1"  # the 3-day-old call is not today's
    timeline = reverse("dashboard:message_timeline", args=[message.pk])
    assert f'data-failure="{timeout.pk}"' in html and timeline in html
    assert f'data-failure="{old.pk}"' not in html

    week = staff.get(reverse("dashboard:tools") + "?range=7d").content.decode()
    assert cell(row_of(week, "lookup"), "calls") == "2" and f'data-failure="{old.pk}"' in week


def test_no_calls_says_so_and_people_who_are_not_staff_are_sent_away(staff, user):
    html = staff.get(reverse("dashboard:tools") + "?range=nonsense").content.decode()
    assert "No tool was called over the last 24 hours." in html
    staff.force_login(user)
    assert staff.get(reverse("dashboard:tools")).status_code in (302, 403)
