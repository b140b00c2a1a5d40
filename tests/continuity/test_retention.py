from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from continuity.delivery.attempts.lease import attempt_begin
from continuity.delivery.inbox import message_accept
from continuity.delivery.processing import drain_conversation
from continuity.models import Checkpoint, Message, ReplyChunk

pytestmark = pytest.mark.django_db


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
    assert Checkpoint.objects.filter(message=recent).count() == 3  # plan, respond, remember
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


def test_old_history_is_pruned_but_dead_letters_waiting_for_staff_are_kept(conversation):
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session

    from continuity.delivery.dead_letters import dead_letter_create
    from continuity.delivery.retention import history_prune
    from continuity.models import Alert, CrashRecord, DeadLetter, Run, Worker

    old = answered(conversation)
    waiting = message_accept(conversation=conversation, text="poison", client_id=uuid.uuid4())
    handled = message_accept(conversation=conversation, text="bad", client_id=uuid.uuid4())
    for message in (waiting, handled):
        run = attempt_begin(conversation_id=conversation.pk)
        assert run.message_id == message.pk
        Run.objects.filter(pk=run.pk).update(state="crashed", ended_at=timezone.now())
        CrashRecord.objects.create(
            conversation=conversation, message=message, run=run, detected_by="watchdog"
        )
        dead_letter_create(message=message, reason="test")
    DeadLetter.objects.filter(message=handled).update(status="discarded")
    alert = Alert.objects.create(kind="conversation_paused", conversation=conversation, text="x")
    worker = Worker.objects.create(
        name="gone@host", hostname="host", pid=1, started_at=timezone.now(),
        last_seen_at=timezone.now(),
    )  # fmt: skip
    expired = SessionStore()
    expired.set_expiry(-1)
    expired.create()

    long_ago = timezone.now() - timedelta(days=91)
    Run.objects.update(ended_at=long_ago)
    CrashRecord.objects.update(resolved_at=long_ago)
    Alert.objects.filter(kind="conversation_paused").update(acknowledged_at=long_ago)
    DeadLetter.objects.update(created_at=long_ago)
    Worker.objects.update(last_seen_at=long_ago)
    fresh = Alert.objects.create(kind="conversation_paused", conversation=conversation, text="y")

    pruned = history_prune()

    # The handled dead letter's crash record went with its run; the waiting one's stays.
    assert pruned == {"runs": 2, "crash_records": 0, "alerts": 1, "dead_letters": 1, "workers": 1}
    assert list(Run.objects.values_list("message_id", flat=True)) == [waiting.pk]
    assert list(CrashRecord.objects.values_list("message_id", flat=True)) == [waiting.pk]
    assert DeadLetter.objects.get().message_id == waiting.pk
    assert not Run.objects.filter(message=old).exists()
    # The handled dead letter's alert went with it; the waiting one's is still open.
    assert set(Alert.objects.values_list("kind", "dead_letter__message_id")) == {
        ("conversation_paused", None),
        ("dead_letter", waiting.pk),
    }
    assert Alert.objects.filter(pk=fresh.pk).exists() and not Alert.objects.filter(pk=alert.pk)
    assert not Worker.objects.filter(pk=worker.pk).exists()
    assert not Session.objects.filter(session_key=expired.session_key).exists()
    assert Message.objects.filter(pk=old.pk, state="done").exists()  # the history, not the chat


def test_retention_never_brings_a_hidden_branchs_handoff_back(conversation):
    from continuity.actions import message_edit
    from continuity.context.handoffs import handoff_latest
    from continuity.delivery.retention import history_prune
    from continuity.models import Run

    answered(conversation)
    goal = message_accept(
        conversation=conversation, text="My goal is to bake bread", client_id=uuid.uuid4()
    )
    drain_conversation(conversation_id=conversation.pk)
    left_behind = handoff_latest(conversation_id=conversation.pk)
    assert "bake bread" in left_behind.current_state and left_behind.run is not None
    message_edit(message=goal, text="My goal is to learn rye", client_id=uuid.uuid4())
    assert handoff_latest(conversation_id=conversation.pk) != left_behind
    Run.objects.update(ended_at=timezone.now() - timedelta(days=400))

    history_prune(older_than_days=30)

    assert Run.objects.filter(pk=left_behind.run_id).exists()  # it wrote a handoff
    assert handoff_latest(conversation_id=conversation.pk) != left_behind
