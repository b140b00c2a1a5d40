from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connection, transaction
from django.utils import timezone

from continuity.delivery.inbox import conversation_start, message_accept, title_from_text
from continuity.errors import ClientIdReused, InvalidMessage
from continuity.models import Conversation, Message
from tests.helpers.factories import UserFactory
from tests.helpers.waiting import lock_waiters, wait_for

pytestmark = pytest.mark.django_db


def test_accept_stores_a_queued_user_message_and_enqueues_on_commit(
    conversation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        message = message_accept(
            conversation=conversation, text="  Hello  ", client_id=uuid.uuid4()
        )

    message.refresh_from_db()
    assert (message.role, message.state, message.text, message.attempts) == (
        "user",
        "queued",
        "Hello",
        0,
    )
    assert len(callbacks) == 2  # the drain task and the live update, both after commit
    conversation.refresh_from_db()
    assert conversation.enqueued_at is not None


def test_resubmit_with_the_same_client_id_returns_the_same_message(conversation):
    client_id = uuid.uuid4()
    first = message_accept(conversation=conversation, text="once", client_id=client_id)
    again = message_accept(conversation=conversation, text="once", client_id=client_id)
    assert again.pk == first.pk
    assert Message.objects.count() == 1


def test_the_same_client_id_in_another_conversation_is_a_new_message(conversation):
    client_id = uuid.uuid4()
    other = Conversation.objects.create(owner=conversation.owner)
    message_accept(conversation=conversation, text="a", client_id=client_id)
    message_accept(conversation=other, text="a", client_id=client_id)
    assert Message.objects.count() == 2


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_is_refused_and_nothing_is_stored(conversation, text):
    with pytest.raises(InvalidMessage, match="Type a message"):
        message_accept(conversation=conversation, text=text, client_id=uuid.uuid4())
    assert Message.objects.count() == 0


def test_text_over_the_limit_is_refused_with_its_length(conversation, settings):
    settings.CONTINUITY_MAX_MESSAGE_CHARS = 10
    with pytest.raises(InvalidMessage, match="11 characters long; the limit is 10"):
        message_accept(conversation=conversation, text="x" * 11, client_id=uuid.uuid4())
    assert Message.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql("holds a row lock from another session, which SQLite does not have")
def test_a_message_accepted_during_another_ones_transaction_is_numbered_after_it(conversation):
    """Ids follow commit order: while one accept's transaction is open, a second accept in the
    same conversation waits, so it cannot take a later id and commit first."""
    later: list[Message] = []

    def accept_later() -> None:
        try:
            later.append(
                message_accept(conversation=conversation, text="later", client_id=uuid.uuid4())
            )
        finally:
            connection.close()

    thread = threading.Thread(target=accept_later)
    with transaction.atomic():
        first = message_accept(conversation=conversation, text="first", client_id=uuid.uuid4())
        thread.start()
        wait_for(lambda: lock_waiters() or later, timeout=20, what="the second accept to wait")
        assert not later, "the second accept did not wait for the first one's commit"
    thread.join(timeout=20)
    assert later[0].pk > first.pk


def test_conversation_start_is_idempotent_and_titles_from_the_first_message():
    owner = UserFactory()
    client_id = uuid.uuid4()
    first = conversation_start(owner=owner, text="Plan my   trip to Lisbon", client_id=client_id)
    again = conversation_start(owner=owner, text="Plan my trip to Lisbon", client_id=client_id)
    assert again.pk == first.pk
    assert first.title == "Plan my trip to Lisbon"
    assert list(first.messages.values_list("text", flat=True)) == ["Plan my   trip to Lisbon"]


def test_long_titles_are_shortened_with_an_ellipsis():
    title = title_from_text("word " * 40)
    assert len(title) == 60 and title.endswith("…")


def drain_receipt(broker, *, conversation_id: int) -> None:
    """What a worker's consumer does when it takes the conversation's drain off the queue:
    Celery's `task_received`, with the request built from the message the broker holds (the
    message is left where it is)."""
    import json

    from celery.signals import task_received
    from celery.worker.request import Request

    from continuity import celery_app

    celery_app.loader.import_default_modules()  # registers the tasks, as a worker's start does
    with celery_app.connection_for_read() as connection:
        channel = connection.default_channel
        for raw in broker.lrange("celery", 0, -1):
            request = Request(channel.message_to_python(json.loads(raw)), app=celery_app)
            if request.args[0] == conversation_id:
                task_received.send(sender=None, request=request)
                return
    raise AssertionError(f"no drain of conversation {conversation_id} in the queue")


def test_a_conversation_has_at_most_one_drain_waiting_in_the_queue(
    conversation, django_capture_on_commit_callbacks
):
    import redis
    from django.conf import settings

    from continuity.delivery.drains import drain_marker_key, drain_received

    broker = redis.Redis.from_url(settings.REDIS_URL)
    broker.delete("celery")
    other = Conversation.objects.create(owner=conversation.owner)
    with django_capture_on_commit_callbacks(execute=True):
        for number in range(3):
            message_accept(conversation=conversation, text=f"m{number}", client_id=uuid.uuid4())
        message_accept(conversation=other, text="elsewhere", client_id=uuid.uuid4())
    assert broker.llen("celery") == 2
    sequence = int(broker.get(drain_marker_key(conversation.pk)))
    drain_received(conversation_id=conversation.pk, sequence=sequence - 1)  # an older duplicate
    assert broker.exists(drain_marker_key(conversation.pk))  # its own drain still waits
    drain_receipt(broker, conversation_id=conversation.pk)  # a worker took it off the queue
    assert not broker.exists(drain_marker_key(conversation.pk))
    with django_capture_on_commit_callbacks(execute=True):
        message_accept(conversation=conversation, text="m3", client_id=uuid.uuid4())
    assert broker.llen("celery") == 3


def test_a_resubmit_with_the_same_text_returns_the_stored_message(conversation):
    client_id = uuid.uuid4()
    first = message_accept(conversation=conversation, text="Lunch at noon", client_id=client_id)
    again = message_accept(conversation=conversation, text=" Lunch at noon\n", client_id=client_id)
    assert again.pk == first.pk


def test_a_known_client_id_with_edited_text_is_refused_and_nothing_is_stored(conversation):
    client_id = uuid.uuid4()
    message_accept(conversation=conversation, text="Lunch at noon", client_id=client_id)
    with pytest.raises(ClientIdReused, match="already sent with different text"):
        message_accept(conversation=conversation, text="Lunch at one", client_id=client_id)
    assert list(Message.objects.values_list("text", flat=True)) == ["Lunch at noon"]


def test_a_new_conversation_resubmitted_with_edited_text_is_refused(user):
    client_id = uuid.uuid4()
    conversation_start(owner=user, text="Plan a garden", client_id=client_id)
    with pytest.raises(ClientIdReused):
        conversation_start(owner=user, text="Plan a vegetable garden", client_id=client_id)
    assert list(Message.objects.values_list("text", flat=True)) == ["Plan a garden"]


def test_a_soft_time_limit_during_an_enqueue_reaches_the_task(conversation, monkeypatch):
    import redis
    from billiard.exceptions import SoftTimeLimitExceeded
    from django.conf import settings

    from continuity import celery_app
    from continuity.delivery.drains import drain_marker_key, drain_send

    def limit_reached(*args, **kwargs):
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(celery_app, "send_task", limit_reached)
    with pytest.raises(SoftTimeLimitExceeded):
        drain_send(conversation_id=conversation.pk)
    # Without its task the marker would hold off every enqueue of the conversation.
    assert not redis.Redis.from_url(settings.REDIS_URL).exists(drain_marker_key(conversation.pk))


def test_a_broker_error_during_an_enqueue_is_logged_for_the_watchdog(
    conversation, monkeypatch, caplog
):
    from kombu.exceptions import OperationalError

    from continuity import celery_app
    from continuity.delivery.drains import drain_send

    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(celery_app, "send_task", broker_down)
    drain_send(conversation_id=conversation.pk)
    assert "the watchdog will retry" in caplog.text


def test_an_accept_stamps_its_drains_send_in_its_own_transaction(
    conversation, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        message_accept(conversation=conversation, text="Hello", client_id=uuid.uuid4())
    conversation.refresh_from_db()
    assert callbacks  # the drain is still to be sent
    assert conversation.enqueued_at is not None


def test_an_accept_whose_drain_cannot_be_sent_is_due_at_the_watchdogs_next_sweep(
    conversation, monkeypatch, django_capture_on_commit_callbacks
):
    from kombu.exceptions import OperationalError

    from continuity import celery_app
    from continuity.delivery.watchdog import due_conversation_ids

    def broker_down(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(celery_app, "send_task", broker_down)
    Conversation.objects.filter(pk=conversation.pk).update(enqueued_at=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        message_accept(conversation=conversation, text="Hello", client_id=uuid.uuid4())
    conversation.refresh_from_db()
    assert conversation.enqueued_at is None
    assert due_conversation_ids() == [conversation.pk]


def test_threads_that_send_drains_share_one_result_backend():
    """The web process runs each request in a new thread: building a result backend for each
    (Celery looks its plugins up on disk) cost 8 ms a request."""
    from continuity import celery_app

    backends = []
    for _ in range(2):
        thread = threading.Thread(target=lambda: backends.append(celery_app.backend))
        thread.start()
        thread.join()
    assert backends[0] is backends[1]
