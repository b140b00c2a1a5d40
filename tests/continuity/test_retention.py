from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from continuity.attempts import attempt_begin
from continuity.inbox import message_accept
from continuity.models import Checkpoint, Message, ReplyChunk
from continuity.processing import drain_conversation

pytestmark = pytest.mark.django_db(transaction=True)


def answered(conversation) -> Message:
    message = message_accept(conversation=conversation, text="hello", client_id=uuid.uuid4())
    drain_conversation(conversation_id=conversation.pk)
    return message


def test_old_working_state_of_finished_messages_is_pruned(conversation):
    old = answered(conversation)
    recent = answered(conversation)
    long_ago = timezone.now() - timedelta(days=15)
    Checkpoint.objects.filter(message=old).update(created_at=long_ago)
    ReplyChunk.objects.filter(message=old).update(created_at=long_ago)

    call_command("prune_checkpoints", "--days", "14")

    assert not Checkpoint.objects.filter(message=old).exists()
    assert not ReplyChunk.objects.filter(message=old).exists()
    assert Checkpoint.objects.filter(message=recent).count() == 4
    assert Message.objects.get(reply_to=old).text  # the reply itself is history: kept


def test_working_state_of_a_message_still_in_progress_is_kept(conversation):
    message = message_accept(conversation=conversation, text="hello", client_id=uuid.uuid4())
    run = attempt_begin(conversation_id=conversation.pk)
    Checkpoint.objects.create(message=message, run=run, step="plan", output={})
    ReplyChunk.objects.create(message=message, run=run, seq=1, text="Hel")
    long_ago = timezone.now() - timedelta(days=30)
    Checkpoint.objects.update(created_at=long_ago)
    ReplyChunk.objects.update(created_at=long_ago)

    call_command("prune_checkpoints", "--days", "1")

    assert Checkpoint.objects.count() == 1 and ReplyChunk.objects.count() == 1


def test_negative_retention_is_refused():
    with pytest.raises(CommandError, match="must not be negative"):
        call_command("prune_checkpoints", "--days", "-1")
