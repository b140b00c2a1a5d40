"""Stop against a real worker: the attempt ends at its next write or heartbeat, writes nothing
more, and the conversation goes on with the next message."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from continuity.models import Message, ReplyChunk, Run
from tests.helpers.messages import send
from tests.helpers.processes import WorkerProcess
from tests.helpers.promise import LONG_REPLY, assert_promise_kept, wait_finished
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.django_db


def test_stop_mid_reply_keeps_the_partial_reply_and_answers_the_next_message(
    conversation, processes
):
    worker = processes.add(WorkerProcess(CONTINUITY_BUILTIN_TOKEN_DELAY="0.08"))
    long, after = send(conversation, LONG_REPLY), send(conversation, "Thanks!")
    run = wait_streaming(long)
    owner = Client()
    owner.force_login(conversation.owner)
    url = reverse("chat:stop", args=[conversation.pk, long.pk])
    assert owner.post(url, headers={"HX-Request": "true"}).status_code == 204

    wait_finished([long, after])
    reply = Message.objects.get(reply_to=long)
    assert reply.stopped and reply.text
    full = Message.objects.get(reply_to=after)
    assert full.text and not full.stopped
    assert list(Run.objects.filter(message=long).values_list("state", flat=True)) == ["stopped"]
    # The stopped attempt noticed at its next write or heartbeat, and wrote nothing after it.
    wait_for(lambda: "Attempt stopped" in worker.log(), timeout=15, what="the attempt to stop")
    stored = "".join(
        ReplyChunk.objects.filter(run=run).order_by("seq").values_list("text", flat=True)
    )
    assert stored == reply.text
    assert owner.post(url, headers={"HX-Request": "true"}).status_code == 409
    assert_promise_kept([long, after])


@pytest.mark.parametrize(("who", "expected"), [("anonymous", 401), ("other user", 404)])
def test_only_the_owner_can_stop(conversation, who, expected, other_user):
    message = send(conversation, "hello")
    client = Client()
    if who == "other user":
        client.force_login(other_user)
    response = client.post(
        reverse("chat:stop", args=[conversation.pk, message.pk]), headers={"HX-Request": "true"}
    )
    assert response.status_code == expected
