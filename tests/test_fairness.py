"""One user's flood must not starve the others: a conversation has at most one drain waiting in
the queue, and each drain answers messages for one slice (CONTINUITY_DRAIN_SLICE_SECONDS) before it
queues the next behind everyone else."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from continuity.delivery.inbox import message_accept
from continuity.models import Message
from tests.helpers.factories import ConversationFactory
from tests.helpers.processes import WorkerProcess
from tests.helpers.redis_server import session_redis_url
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
FLOOD = 200


@pytest.mark.parametrize("slice_seconds", ["0", None], ids=["one-message-slices", "default-slices"])
def test_another_users_message_is_answered_while_one_user_has_200_queued(processes, slice_seconds):
    broker = redis.Redis.from_url(session_redis_url())
    broker.delete("celery")
    flooded = ConversationFactory()
    for number in range(FLOOD):
        message_accept(conversation=flooded, text=f"flood {number}", client_id=uuid.uuid4())
    assert broker.llen("celery") == 1  # 200 messages, one waiting drain
    other = message_accept(
        conversation=ConversationFactory(), text="My name is Ada", client_id=uuid.uuid4()
    )
    assert broker.llen("celery") == 2

    started = time.monotonic()
    slices = {} if slice_seconds is None else {"CONTINUITY_DRAIN_SLICE_SECONDS": slice_seconds}
    processes.add(WorkerProcess(concurrency=1, **slices))
    wait_for(
        lambda: Message.objects.filter(pk=other.pk, state="done").exists(),
        timeout=60,
        what="the other user's reply",
    )
    waited = time.monotonic() - started
    other_reply = Message.objects.get(reply_to=other)
    answered_before = Message.objects.filter(
        conversation=flooded, role="assistant", pk__lt=other_reply.pk
    ).count()
    # One worker process, and the flood's drain was first in the queue: it answers flood
    # messages for its slice, queues its next drain behind the other user's, and the other user
    # goes next. A slice of 0 is one message; the default slice (half a second) ends long before
    # the flood does (each reply streams for a few tens of milliseconds here).
    if slice_seconds == "0":
        assert answered_before == 1, (answered_before, waited)
    else:
        assert 1 <= answered_before < FLOOD // 2, (answered_before, waited)
    print(f"other user's reply after {waited:.2f} s, after {answered_before} flood message(s)")
