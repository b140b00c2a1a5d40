"""The PostgreSQL primary's host is lost under load and its synchronous standby promoted: no
acknowledged message is lost, answered twice or out of order, and none is charged.

It leaves pg-2 as the primary, with no standby: conftest.py runs the failover tests last.
"""

from __future__ import annotations

import time

from django.db import DatabaseError, connection

from continuity.models import CrashRecord, Message
from tests.helpers.waiting import wait_for
from tests.hosts.load import Load, promise_kept


def replies_in(load: Load) -> int | None:
    """How many replies the load's conversations have, or None while no primary answers (this
    process's connection is then closed, and made again at the next try)."""
    try:
        return Message.objects.filter(
            conversation_id__in=load.ids, role=Message.Role.ASSISTANT
        ).count()
    except DatabaseError:
        connection.close()
        return None


def test_the_primary_lost_under_load_and_its_standby_promoted(deployment, databases, record):
    deployment.start()
    load = Load(deployment.front_a).start()
    wait_for(lambda: (replies_in(load) or 0) >= 10, timeout=60, what="replies under way")

    killed = deployment.host("pg-1").lose()
    lost = time.monotonic()
    databases.standby.promote()
    promoted = round(time.monotonic() - lost, 2)
    # Answers resume: a reply committed on the new primary.
    answered_before = wait_for(lambda: replies_in(load), timeout=60, what="the new primary")
    wait_for(
        lambda: (replies_in(load) or 0) > answered_before,
        timeout=60,
        what="a reply committed on the new primary",
    )
    resumed = round(time.monotonic() - lost, 2)

    verdict = load.verdict()
    crashes = CrashRecord.objects.filter(conversation_id__in=load.ids).count()
    record(
        **verdict,
        processes_killed=len(killed),
        seconds_until_promoted=promoted,
        seconds_until_answers_resumed=resumed,
        attempts_charged=crashes,
    )
    promise_kept(verdict, unavailable=True)
    assert crashes == 0, "an outage of the database was charged to a message"
