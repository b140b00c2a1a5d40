"""The spine with real parts: HTTP POST → PostgreSQL → Redis → Celery worker process → reply."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse

from continuity.models import Message
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def post_message(client, conversation, text, client_id):
    return client.post(
        reverse("chat:message_send", args=[conversation.pk]),
        {"text": text, "client_id": str(client_id)},
        headers={"HX-Request": "true"},
    )


def test_a_posted_message_is_answered_by_a_worker_process(client, worker):
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    client.force_login(user)

    response = post_message(client, conversation, "My name is Linus", uuid.uuid4())
    assert response.status_code == 200

    reply = wait_for(
        lambda: Message.objects.filter(role="assistant", conversation=conversation).first(),
        timeout=30,
        what="the worker's reply",
    )
    assert "Linus" in reply.text
    assert reply.reply_to.state == "done"


def test_a_resubmitted_post_yields_one_message_and_one_reply(client, worker):
    user = UserFactory()
    conversation = ConversationFactory(owner=user)
    client.force_login(user)
    client_id = uuid.uuid4()

    for _ in range(3):
        assert post_message(client, conversation, "hello", client_id).status_code == 200
    after = post_message(client, conversation, "and another", uuid.uuid4())
    assert after.status_code == 200

    wait_for(
        lambda: Message.objects.filter(role="user", state="done").count() == 2,
        timeout=30,
        what="both messages answered",
    )
    assert Message.objects.filter(role="user").count() == 2
    assert Message.objects.filter(role="assistant").count() == 2
