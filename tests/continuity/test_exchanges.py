"""What a rendering of exchanges and of the status reads: every live change is rendered, so a
message still queued or being answered must not pay for rows it cannot have yet."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.errors import MODEL_BUSY
from continuity.models import Conversation, Message, Recovery, ReplyChunk, Run
from continuity.selectors import conversation_status, exchange_as_accepted, exchanges_of
from tests.helpers.factories import ConversationFactory
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


@pytest.fixture
def conversation():
    return ConversationFactory()


def test_a_queued_message_is_read_with_one_query(conversation, django_assert_num_queries):
    message = send(conversation, "Hello")
    with django_assert_num_queries(1):
        [exchange] = exchanges_of(conversation=conversation, message_ids=[message.pk])
    assert exchange.message == message and exchange.reply is None
    assert exchange.recoveries == () and exchange.versions is None


def test_a_message_just_accepted_is_shown_as_stored(conversation, django_assert_num_queries):
    message = send(conversation, "Hello")
    with django_assert_num_queries(0):
        exchange = exchange_as_accepted(conversation=conversation, message=message)
    assert exchange.message is message and exchange.reply is None


def test_a_resubmitted_message_that_moved_on_is_read_again(conversation):
    client_id = uuid.uuid4()
    message_accept(conversation=conversation, text="Hello", client_id=client_id)
    attempt_begin(conversation_id=conversation.pk)
    again = message_accept(conversation=conversation, text="Hello", client_id=client_id)
    exchange = exchange_as_accepted(conversation=conversation, message=again)
    assert exchange.message.state == Message.State.PROCESSING
    assert exchange.streaming_run_id is not None


def test_a_message_being_answered_reads_its_stored_chunks(conversation, django_assert_num_queries):
    message = send(conversation, "Hello")
    run = attempt_begin(conversation_id=conversation.pk)
    for seq, text in enumerate(["Hel", "lo"], start=1):
        ReplyChunk.objects.create(message=message, run=run, seq=seq, text=text)
    # The message, its running attempt, that one's chunks, its tool calls.
    with django_assert_num_queries(4):
        [exchange] = exchanges_of(conversation=conversation, message_ids=[message.pk])
    assert (exchange.streaming_run_id, exchange.streamed_text, exchange.last_seq) == (
        run.pk,
        "Hello",
        2,
    )


def test_an_answered_message_reads_its_reply_and_its_versions(
    conversation, django_assert_num_queries
):
    message = send(conversation, "Hello")
    Message.objects.filter(pk=message.pk).update(state=Message.State.DONE)
    reply = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        text="Hi",
        state=Message.State.DONE,
        reply_to=message,
    )
    with django_assert_num_queries(3):  # the message, its reply, any later versions
        [exchange] = exchanges_of(conversation=conversation, message_ids=[message.pk])
    assert exchange.reply == reply


def test_the_status_asks_for_a_backoff_only_when_one_is_set(
    conversation, django_assert_num_queries
):
    message = send(conversation, "Hello")
    with django_assert_num_queries(1):  # whether an interrupted message waits for a worker
        status = conversation_status(conversation=conversation)
    assert status["retry_in"] is None and not status["resuming"]
    Message.objects.filter(pk=message.pk).update(interruptions=1)  # a planned restart
    assert conversation_status(conversation=conversation)["resuming"]

    Message.objects.filter(pk=message.pk).update(attempts=1)
    Conversation.objects.filter(pk=conversation.pk).update(
        retry_at=timezone.now() + timedelta(seconds=30)
    )
    conversation.refresh_from_db()
    with django_assert_num_queries(1):
        status = conversation_status(conversation=conversation)
    assert 25 <= status["retry_in"] <= 30 and status["crashes"] == 1  # why it waits


def test_a_message_interrupted_again_shows_its_last_partial_reply_and_folds_earlier_banners(
    conversation,
):
    message = send(conversation, "Hello")
    now = timezone.now()

    def stopped_run(attempt: int, state: str, error: str, text: str = "") -> Run:
        run = Run.objects.create(
            conversation=conversation,
            message=message,
            attempt=attempt,
            state=state,
            error=error,
            heartbeat_at=now,
            ended_at=now,
        )
        for seq, word in enumerate(text.split(), start=1):
            ReplyChunk.objects.create(message=message, run=run, seq=seq, text=f"{word} ")
        return run

    first = stopped_run(1, Run.State.CRASHED, "Heartbeat stopped", "Nice to")
    second = stopped_run(2, Run.State.CRASHED, "Heartbeat stopped", "Nice to meet you")
    Recovery.objects.create(
        conversation=conversation,
        message=message,
        run=second,
        interrupted_run=first,
        kind=Recovery.Kind.CRASH,
        interrupted_at=now,
    )
    # Then a wait for a free slot of a busy model server: nothing was interrupted by it.
    stopped_run(2, Run.State.INTERRUPTED, f"{MODEL_BUSY}: all slots taken")
    Message.objects.filter(pk=message.pk).update(attempts=2)

    [exchange] = exchanges_of(conversation=conversation, message_ids=[message.pk])
    assert exchange.interrupted.text == "Nice to meet you "
    assert exchange.interrupted.why == "a worker process stopped"
    html = render_to_string("chat/conversation.html#exchange", {"exchange": exchange})
    assert "data-interrupted" in html and "Nice to meet you" in html
    # The banner of the recovery before is a detail now: the status line is the one notice.
    assert 'class="banner recovery"' not in html and "data-earlier-attempts" in html


@pytest.mark.parametrize(
    ("ending", "text", "note"),
    [
        ({}, "Done.", None),
        (
            {"stopped": True},
            "Once upon",
            ("stopped", "Stopped: this reply was cut short at your request."),
        ),
        ({"stopped": True}, "", ("stopped", "Stopped before anything was written.")),
        (
            {"stopped": True, "stopped_by_staff": True},
            "Once upon",
            ("stopped", "Stopped by staff: this reply was cut short."),
        ),
        (
            {"stopped": True, "stopped_by_staff": True},
            "",
            ("stopped", "Stopped by staff before anything was written."),
        ),
        (
            {"cut_off": True},
            "Once upon",
            ("cut-off", "Cut off: the model reached its length limit."),
        ),
    ],
)
def test_an_unfinished_reply_says_why_once_in_its_exchange(conversation, ending, text, note):
    """The page and the export say the same note, read from the exchange (`reply_note`)."""
    from continuity.selectors import reply_note

    question = send(conversation, "Tell me a story")
    reply = Message.objects.create(
        conversation=conversation,
        role=Message.Role.ASSISTANT,
        reply_to=question,
        text=text,
        **ending,
    )
    Message.objects.filter(pk=question.pk).update(state=Message.State.DONE)
    (exchange,) = exchanges_of(conversation=conversation, message_ids=[question.pk])
    said = exchange.reply_note
    assert (said and (said.kind, said.text)) == (note or None)
    assert reply_note(reply=reply) == said
