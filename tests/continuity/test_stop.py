"""Stop: the person cuts a reply short; what was written is kept, nothing is retried."""

from __future__ import annotations

import pytest

from continuity.actions import reply_stop
from continuity.delivery.attempts.finish import attempt_finish
from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.processing import chunk_store
from continuity.errors import AttemptStopped, InvalidTransition
from continuity.models import Message, Run
from tests.helpers.messages import send

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)  # what it sends goes on commit
def test_a_stopped_reply_keeps_what_was_written_and_the_next_message_goes_on(
    conversation, monkeypatch
):
    sent = []
    monkeypatch.setattr(
        "continuity.delivery.drains.drain_send",
        lambda *, conversation_id, **_: sent.append(conversation_id),
    )
    first, second = send(conversation, "Tell me a long story"), send(conversation, "Thanks")
    run = attempt_begin(conversation_id=conversation.pk)
    chunk_store(run=run, seq=1, text="Once upon ")
    chunk_store(run=run, seq=2, text="a time")
    sent.clear()

    reply = reply_stop(message=first)
    assert (reply.text, reply.stopped, reply.reply_to_id) == ("Once upon a time", True, first.pk)
    run.refresh_from_db()
    first.refresh_from_db()
    assert (run.state, first.state) == ("stopped", "done")
    assert sent == [conversation.pk]  # the next message is queued for a drain
    # The attempt writes nothing more: neither chunks nor a second reply.
    with pytest.raises(AttemptStopped):
        chunk_store(run=run, seq=3, text=" there was")
    with pytest.raises(AttemptStopped):
        attempt_finish(run=run, reply_text="Once upon a time there was a dragon.")
    assert Message.objects.filter(reply_to=first).count() == 1
    # Nothing is retried: the next attempt takes the next message.
    assert attempt_begin(conversation_id=conversation.pk).message_id == second.pk
    assert Run.objects.filter(message=first).count() == 1


def test_only_a_reply_being_written_can_be_stopped(conversation):
    message = send(conversation, "hello")
    with pytest.raises(InvalidTransition, match="No reply is being written"):
        reply_stop(message=message)
    run = attempt_begin(conversation_id=conversation.pk)
    reply_stop(message=message)
    with pytest.raises(InvalidTransition):
        reply_stop(message=message)
    assert Run.objects.get(pk=run.pk).state == "stopped"


def test_a_stop_before_any_text_keeps_an_empty_stopped_reply(conversation):
    message = send(conversation, "hello")
    attempt_begin(conversation_id=conversation.pk)
    assert reply_stop(message=message).text == ""
