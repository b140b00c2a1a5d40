"""The Waiting page: every conversation with messages waiting, why, for how long, when next;
Retry now and Pause, each with a reason and an audit row."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from continuity.delivery.attempts.lease import attempt_begin
from continuity.models import Alert, Conversation, Message, StaffAction
from tests.helpers.factories import ConversationFactory, MessageFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    client.force_login(UserFactory(is_staff=True, username="opal"))
    return client


def waiting_with(title: str, **conversation) -> Conversation:
    chat = ConversationFactory(title=title)
    MessageFactory(conversation=chat, attempts=1)
    Conversation.objects.filter(pk=chat.pk).update(**conversation)
    return chat


def row_of(html: str, chat: Conversation) -> str:
    return html.split(f'data-waiting="{chat.pk}"')[1].split("</tr>")[0]


def test_each_waiting_conversation_says_why_and_when_it_is_tried_next(staff):
    soon = timezone.now() + timedelta(seconds=90)
    backing_off = waiting_with("Backing off", retry_at=soon)
    model_down = waiting_with("Model down", retry_at=soon, waiting_for="model")
    paused = waiting_with("Paused", state="paused", paused_reason="3 crashes within 3600 s")
    in_turn = waiting_with("In turn")
    answering = ConversationFactory(title="Answering")
    MessageFactory(conversation=answering)
    MessageFactory(conversation=answering)
    attempt_begin(conversation_id=answering.pk)
    answered = ConversationFactory(title="All answered")
    MessageFactory(conversation=answered, state=Message.State.DONE)

    html = staff.get(reverse("dashboard:waiting")).content.decode()
    assert f'data-waiting="{answered.pk}"' not in html
    row = row_of(html, backing_off)
    assert "Backing off after a failed or crashed attempt" in row
    assert re.search(r"in 1 min (2[5-9]|30) s", row)  # about 90 s, on the database's clock
    assert "Retry now…" in row and "Pause…" in row
    assert "The model server is unavailable" in row_of(html, model_down)
    row = row_of(html, paused)
    assert "3 crashes within 3600 s" in row and "Resume from its page" in row
    assert "Retry now…" not in row and "Pause…" not in row
    assert "Its turn in the queue" in row_of(html, in_turn)
    row = row_of(html, answering)
    assert "an earlier message is being answered" in row and "1 message" in row
    assert "Retry now…" not in row


def test_retry_now_ends_the_backoff_with_a_reason_in_the_audit_log(staff):
    chat = waiting_with("Backing off", retry_at=timezone.now() + timedelta(seconds=90))
    url = reverse("dashboard:conversation_retry_now", args=[chat.pk])

    refused = staff.post(url, {f"retry-{chat.pk}-reason": ""})
    assert refused.status_code == 422 and "This field is required" in refused.content.decode()
    assert not StaffAction.objects.exists()

    assert staff.post(url, {f"retry-{chat.pk}-reason": "server back"}).status_code == 302
    chat.refresh_from_db()
    assert chat.retry_at <= timezone.now()
    action = StaffAction.objects.get()
    assert (action.kind, action.reason, action.actor_name) == ("retry_now", "server back", "opal")
    # Again: nothing to retry any more, and nothing recorded.
    page = staff.post(url, {f"retry-{chat.pk}-reason": "again"}, follow=True)
    assert "no longer waiting on a backoff" in page.content.decode()
    assert StaffAction.objects.count() == 1


def test_pause_stops_the_conversation_with_a_reason_in_the_audit_log(staff):
    chat = waiting_with("In turn")
    url = reverse("dashboard:conversation_pause", args=[chat.pk])
    assert staff.post(url, {f"pause-{chat.pk}-reason": "looks abusive"}).status_code == 302
    chat.refresh_from_db()
    assert chat.state == "paused" and chat.paused_reason == "Paused by opal: looks abusive"
    action = StaffAction.objects.get()
    assert (action.kind, action.reason) == ("pause", "looks abusive")
    # Audited, not alerted: staff are not alerted to what one of them did (#46 item 10).
    assert not Alert.objects.exists()
    # Staff's reason stays with staff: the person's notes and the agent read "paused by support".
    notes = chat.handoffs.latest("version").current_state
    assert "paused by support" in notes and "abusive" not in notes and "opal" not in notes
    owner = Client()
    owner.force_login(chat.owner)
    page = owner.get(reverse("chat:conversation", args=[chat.pk])).content.decode()
    assert "Support paused this conversation" in page and "abusive" not in page


def test_a_conversation_held_for_a_decision_says_which_tool_is_in_doubt(staff):
    from continuity.models import ToolCall

    chat = waiting_with("Ledger", state=Conversation.State.DECIDING)
    message = chat.messages.get()
    ToolCall.objects.create(
        message=message, round=1, position=0, call_id="c", tool="ledger_append", state="in_doubt"
    )

    html = staff.get(reverse("dashboard:waiting")).content.decode()

    assert "A tool call in doubt (ledger_append)" in row_of(html, chat)


def test_a_conversation_waiting_for_an_approval_says_which_tool_and_offers_no_retry(staff):
    from continuity.models import ToolCall

    chat = waiting_with("Ledger")
    Conversation.objects.filter(pk=chat.pk).update(
        retry_at=timezone.now() + timedelta(minutes=15), waiting_for="approval"
    )
    ToolCall.objects.create(
        message=chat.messages.get(), round=1, position=0, call_id="c", tool="ledger_append",
        state="awaiting", approval_due_at=timezone.now() + timedelta(minutes=15),
    )  # fmt: skip

    row = row_of(staff.get(reverse("dashboard:waiting")).content.decode(), chat)

    assert "approval of a tool call (ledger_append)" in row
    assert "Retry now" not in row
