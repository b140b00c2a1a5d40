"""What a rendering of exchanges and of the status reads: every live change is rendered, so a
message still queued or being answered must not pay for rows it cannot have yet."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from continuity.delivery.attempts import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.models import Conversation, Message, ReplyChunk
from continuity.selectors import conversation_status, exchange_as_accepted, exchanges_of
from tests.factories import ConversationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation():
    return ConversationFactory()


def send(conversation: Conversation, text: str = "Hello") -> Message:
    return message_accept(conversation=conversation, text=text, client_id=uuid.uuid4())


def test_a_queued_message_is_read_with_one_query(conversation, django_assert_num_queries):
    message = send(conversation)
    with django_assert_num_queries(1):
        [exchange] = exchanges_of(conversation, message_ids=[message.pk])
    assert exchange.message == message and exchange.reply is None
    assert exchange.recoveries == () and exchange.versions is None


def test_a_message_just_accepted_is_shown_as_stored(conversation, django_assert_num_queries):
    message = send(conversation)
    with django_assert_num_queries(0):
        exchange = exchange_as_accepted(conversation, message)
    assert exchange.message is message and exchange.reply is None


def test_a_resubmitted_message_that_moved_on_is_read_again(conversation):
    client_id = uuid.uuid4()
    message_accept(conversation=conversation, text="Hello", client_id=client_id)
    attempt_begin(conversation_id=conversation.pk)
    again = message_accept(conversation=conversation, text="Hello", client_id=client_id)
    exchange = exchange_as_accepted(conversation, again)
    assert exchange.message.state == Message.State.PROCESSING
    assert exchange.streaming_run_id is not None


def test_a_message_being_answered_reads_its_stored_chunks(conversation, django_assert_num_queries):
    message = send(conversation)
    run = attempt_begin(conversation_id=conversation.pk)
    for seq, text in enumerate(["Hel", "lo"], start=1):
        ReplyChunk.objects.create(message=message, run=run, seq=seq, text=text)
    with django_assert_num_queries(3):  # the message, its running attempt, that one's chunks
        [exchange] = exchanges_of(conversation, message_ids=[message.pk])
    assert (exchange.streaming_run_id, exchange.streamed_text, exchange.last_seq) == (
        run.pk,
        "Hello",
        2,
    )


def test_an_answered_message_reads_its_reply_and_its_versions(
    conversation, django_assert_num_queries
):
    message = send(conversation)
    Message.objects.filter(pk=message.pk).update(state=Message.State.DONE)
    reply = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text="Hi",
        state=Message.State.DONE,
        reply_to=message,
    )
    with django_assert_num_queries(3):  # the message, its reply, any later versions
        [exchange] = exchanges_of(conversation, message_ids=[message.pk])
    assert exchange.reply == reply


def test_the_status_asks_for_a_backoff_only_when_one_is_set(
    conversation, django_assert_num_queries
):
    message = send(conversation)
    with django_assert_num_queries(1):  # whether an interrupted message waits for a worker
        status = conversation_status(conversation)
    assert status["retry_in"] is None and not status["resuming"]
    Message.objects.filter(pk=message.pk).update(interruptions=1)  # a planned restart
    assert conversation_status(conversation)["resuming"]

    Message.objects.filter(pk=message.pk).update(attempts=1)
    Conversation.objects.filter(pk=conversation.pk).update(
        retry_at=timezone.now() + timedelta(seconds=30)
    )
    conversation.refresh_from_db()
    with django_assert_num_queries(1):
        assert 25 <= conversation_status(conversation)["retry_in"] <= 30
