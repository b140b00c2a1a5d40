"""Staff actions on dead letters: a retry re-asks the message at the end of the conversation."""

from __future__ import annotations

import pytest

from continuity.actions import (
    alert_acknowledge,
    dead_letter_discard,
    dead_letter_retry,
    dead_letters_retry,
)
from continuity.delivery.attempts.failures import attempt_end
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.processing import drain_conversation
from continuity.errors import InvalidMessage, InvalidTransition
from continuity.models import Alert, DeadLetter, Message, RunContext, StaffAction
from tests.helpers.console import dead_letter_make
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff():
    return UserFactory(is_staff=True)


@pytest.fixture
def chat():
    return ConversationFactory()


def test_a_retry_asks_again_at_the_end_after_what_was_said_since(chat, staff):
    dead_letter = dead_letter_make(chat, "My name is Ada")
    later = send(chat, "Thanks")
    drain_conversation(conversation_id=chat.pk)  # the conversation moved on
    assert Message.objects.get(reply_to=later)

    reask = dead_letter_retry(dead_letter=dead_letter, by=staff, reason="brain fixed")
    assert reask.pk > Message.objects.get(reply_to=later).pk
    assert (reask.text, reask.reasked_from_id, reask.attempts) == (
        "My name is Ada",
        dead_letter.message_id,
        0,
    )
    dead_letter.refresh_from_db()
    assert (dead_letter.status, dead_letter.retried_as_id, dead_letter.resolved_by) == (
        "retried",
        reask.pk,
        staff,
    )
    original = Message.objects.get(pk=dead_letter.message_id)
    assert original.state == "dead" and not original.checkpoints.exists()

    drain_conversation(conversation_id=chat.pk)
    reply = Message.objects.get(reply_to=reask)
    assert reply.pk > Message.objects.get(reply_to=later).pk
    # The re-ask's context holds the exchange answered while it waited.
    assert later.pk in RunContext.objects.get(run__message=reask).turns
    action = StaffAction.objects.get(dead_letter=dead_letter)
    assert (action.kind, action.actor, action.reason) == ("retry", staff, "brain fixed")
    assert action.details["message_id"] == reask.pk


def test_edit_and_retry_asks_the_corrected_text_and_keeps_the_original(chat, staff):
    dead_letter = dead_letter_make(chat, "My nmae is Ada [[broken]]")
    reask = dead_letter_retry(dead_letter=dead_letter, by=staff, text="My name is Ada")
    assert reask.text == "My name is Ada"
    action = StaffAction.objects.get(dead_letter=dead_letter)
    assert action.kind == "edit_and_retry"
    assert action.details["original_text"] == "My nmae is Ada [[broken]]"
    assert action.details["text"] == "My name is Ada"
    drain_conversation(conversation_id=chat.pk)
    assert Message.objects.get(reply_to=reask).text.startswith("Nice to meet you, **Ada**")


def test_an_edit_that_changes_nothing_is_a_plain_retry(chat, staff):
    dead_letter = dead_letter_make(chat, "hello there")
    dead_letter_retry(dead_letter=dead_letter, by=staff, text="  hello   there ")
    assert StaffAction.objects.get().kind == "retry"


def test_an_edit_is_checked_like_a_message(chat, staff, settings):
    settings.CONTINUITY_MAX_MESSAGE_CHARS = 10
    dead_letter = dead_letter_make(chat, "short")
    with pytest.raises(InvalidMessage, match="limit is 10"):
        dead_letter_retry(dead_letter=dead_letter, by=staff, text="x" * 11)
    with pytest.raises(InvalidMessage, match="Type a message"):
        dead_letter_retry(dead_letter=dead_letter, by=staff, text="   ")
    assert DeadLetter.objects.get().status == "pending" and not StaffAction.objects.exists()


def test_a_dead_letter_is_dealt_with_once(chat, staff):
    dead_letter = dead_letter_make(chat, "hello")
    dead_letter_retry(dead_letter=dead_letter, by=staff)
    with pytest.raises(InvalidTransition, match="already retried"):
        dead_letter_retry(dead_letter=dead_letter, by=staff)
    with pytest.raises(InvalidTransition, match="already retried"):
        dead_letter_discard(dead_letter=dead_letter, by=staff, reason="spam")
    assert Message.objects.filter(reasked_from=dead_letter.message_id).count() == 1


def test_discard_needs_a_reason_and_is_recorded(chat, staff):
    dead_letter = dead_letter_make(chat, "hello")
    with pytest.raises(InvalidMessage, match="Say why"):
        dead_letter_discard(dead_letter=dead_letter, by=staff, reason=" ")
    version = Message.objects.get(pk=dead_letter.message_id).version
    dead_letter_discard(dead_letter=dead_letter, by=staff, reason="abusive")
    dead_letter.refresh_from_db()
    assert dead_letter.status == "discarded" and dead_letter.retried_as is None
    assert StaffAction.objects.get().reason == "abusive"
    # Re-rendered on the owner's open pages: the notice under the message changes.
    assert Message.objects.get(pk=dead_letter.message_id).version == version + 1


def test_bulk_retry_keeps_the_order_the_messages_were_sent_in(chat, staff):
    letters = [dead_letter_make(chat, f"message {n}") for n in range(3)]
    dead_letter_retry(dead_letter=letters[1], by=staff)
    done, problems = dead_letters_retry(dead_letters=list(reversed(letters)), by=staff)
    assert done == 2 and problems == [f"Dead letter {letters[1].pk} was already retried."]
    reasks = Message.objects.filter(reasked_from__isnull=False).order_by("id")
    assert [m.text for m in reasks] == ["message 1", "message 0", "message 2"]


def test_error_classes_name_what_ended_the_last_attempt(chat):
    assert dead_letter_make(chat, "a", error="ValueError: bad").error_class == "ValueError"
    assert dead_letter_make(chat, "b", error="The model refused.").error_class == "Error"
    message = send(chat, "c")
    run = attempt_begin(conversation_id=chat.pk)
    Message.objects.filter(pk=message.pk).update(attempts=3)
    attempt_end(run_id=run.pk, state="crashed", error="Heartbeat stopped", detected_by="watchdog")
    assert DeadLetter.objects.get(message=message).error_class == "Worker crash"


def test_an_alert_is_acknowledged_once_with_its_author(chat, staff):
    alert = Alert.objects.create(kind="conversation_paused", conversation=chat, text="paused")
    alert_acknowledge(alert=alert, by=staff, reason="looking into it")
    alert.refresh_from_db()
    assert alert.acknowledged_by == staff and alert.acknowledged_at
    with pytest.raises(InvalidTransition, match="already acknowledged"):
        alert_acknowledge(alert=alert, by=staff)
    assert StaffAction.objects.get().kind == "acknowledge"
