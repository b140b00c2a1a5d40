"""The Redis primary's host is lost under load, and Sentinel promotes its replica: the broker,
the drain markers, the rate limiter and the live layer all follow it there. Replication is
asynchronous, so what the primary had not yet passed on is lost with it: drains the watchdog
sends again, and live updates that the pages catch up on.

It leaves `redis-2` as the primary, with no replica: conftest.py runs the failover tests last.
"""

from __future__ import annotations

import time

from continuity.database.clock import database_now
from continuity.models import CrashRecord, Message, Run
from tests.helpers.waiting import wait_for
from tests.hosts.load import Load, promise_kept
from tests.hosts.pages import WatchingPage, servers_rendering


def test_the_redis_primary_lost_under_load_and_its_replica_promoted(
    deployment, redises, signed_in, record
):
    deployment.start()
    load = Load(deployment.front_a)
    watched = load.conversations[0]
    context = signed_in(watched.owner)
    watching = WatchingPage(context, deployment.front_b, watched)
    load.start()
    replies = Message.objects.filter(conversation_id__in=load.ids, role=Message.Role.ASSISTANT)
    wait_for(lambda: replies.count() >= 10, timeout=60, what="replies under way")

    lost_at, lost = database_now(), time.monotonic()
    killed = deployment.host("redis").lose()
    replica = redises.replica.host.address
    wait_for(
        lambda: all(sentinel.primary() == replica for sentinel in redises.sentinels),
        timeout=60,
        what="the Sentinels to promote the replica",
    )
    promoted = round(time.monotonic() - lost, 2)
    # Answers resume: an attempt started through the new primary (every attempt is a drain
    # that the broker delivered).
    wait_for(
        Run.objects.filter(conversation_id__in=load.ids, started_at__gt=lost_at).exists,
        timeout=60,
        what="an attempt started after the loss",
    )
    resumed = round(time.monotonic() - lost, 2)

    verdict = load.verdict()
    crashes = CrashRecord.objects.filter(conversation_id__in=load.ids).count()
    last = load.user_messages().filter(conversation=watched).last()
    watching.shows_answered(last, timeout=30_000)
    record(
        **verdict,
        processes_killed=len(killed),
        seconds_until_promoted=promoted,
        seconds_until_answers_resumed=resumed,
        page_sockets=watching.sockets,
        attempts_charged=crashes,
    )
    promise_kept(verdict)
    assert crashes == 0, "an outage of Redis was charged to a message"
    assert watching.reply(last).inner_html() == servers_rendering(context, deployment.front_a, last)
    assert watching.same_document()
