"""Worker nodes announce themselves so staff can see who is alive.

Each start of a worker is an incarnation with its own id, inherited by its pool processes and
stored on every attempt they make: a restarted node, or a second worker misconfigured with the
same node name, then never takes another incarnation's live attempts for its own.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta
from pathlib import Path

import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from ..database.clock import db_now_plus
from ..live.events import publish_conversation_changed
from ..models import Alert, Conversation, CrashRecord, Message, Worker
from .alerts import alert_mail
from .heartbeats import (
    key_delete,
    key_refresh,
    key_set,
    keys_alive,
    redis_client,
    run_key,
    stale_before,
    worker_key,
)

logger = logging.getLogger(__name__)
_incarnation = ""


def incarnation_begin() -> str:
    """Called in the worker's main process before its pool processes are forked."""
    global _incarnation
    _incarnation = uuid.uuid4().hex
    return _incarnation


def current_incarnation() -> str:
    return _incarnation


STOPPING_SECONDS = 3600


def stopping_key(node: str) -> str:
    return f"continuity:worker:{node}:{current_incarnation()}:stopping"


def worker_stopping_mark(*, node: str) -> None:
    """A planned shutdown of this start of the node began: its pool processes begin no further
    attempt (a drain's slice would otherwise go on after the handover of its attempts)."""
    try:
        redis_client().set(stopping_key(node), "1", ex=STOPPING_SECONDS)
    except redis.RedisError:
        logger.warning("Shutdown of worker %s not marked: Redis unavailable", node)


def attempt_key_write(*, run_id: int, node: str) -> bool:
    """Write the heartbeat key of a run that begins on this worker, and say whether a planned
    shutdown of this start of the node began (the run must then not begin: its worker hands
    over its attempts), in one round trip. False when Redis cannot say: the handover then
    catches the attempt, or the watchdog does."""
    try:
        pipeline = redis_client().pipeline(transaction=False)
        key_set(pipeline, run_key(run_id))
        _, stopping = pipeline.exists(stopping_key(node)).execute()
    except redis.RedisError:
        logger.warning("Attempt %s: heartbeat key not written, Redis unavailable", run_id)
        return False
    return bool(stopping)


def process_gone(worker: str) -> bool:
    """Whether the process named "host:pid" (as runs record it) is known to be dead: only a
    process of this host can be checked; of another host nothing is known."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return process_ended(int(pid))


def process_ended(pid: int) -> bool:
    """Whether a process that still has its pid has ended: a zombie, not yet collected by its
    parent. A killed worker's pool processes stay so until init collects them, which took up
    to two seconds on the machines this runs on. False where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].startswith("Z")


def worker_announce(*, name: str) -> Worker:
    previous = Worker.objects.filter(name=name, stopped_at=None).first()
    if (
        previous is not None
        and previous.pid != os.getpid()
        and keys_alive([worker_key(name)])
        and not process_gone(f"{previous.hostname}:{previous.pid}")
    ):
        logger.error(
            "Another live worker (%s:%s) already uses the node name %s: give every worker a "
            "unique --hostname",
            previous.hostname,
            previous.pid,
            name,
        )
    worker, _ = Worker.objects.update_or_create(
        name=name,
        defaults={
            "incarnation": current_incarnation(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": Now(),
            "last_seen_at": Now(),
            "stopped_at": None,
        },
    )
    key_refresh(worker_key(name))
    return worker


def worker_stopped(*, name: str) -> None:
    Worker.objects.filter(name=name, incarnation=current_incarnation()).update(stopped_at=Now())
    key_delete(worker_key(name))


def workers_check() -> bool:
    """Whether a worker is live (it heartbeats). With none live while a message has waited
    CONTINUITY_NO_WORKER_ALERT_SECONDS, raise the "no worker" alert, once, and show the
    waiting conversations' pages again (they say that no assistant runs); with a worker live
    again, clear it, and show them again."""
    live = Worker.objects.filter(stopped_at__isnull=True, last_seen_at__gte=stale_before())
    if live.exists():
        cleared = Alert.objects.filter(kind=Alert.Kind.NO_WORKER, acknowledged_at__isnull=True)
        if cleared.update(acknowledged_at=Now()):
            logger.info("A worker is live again: the no-worker alert is cleared")
            waiting_pages_refresh()
        return True
    waited = db_now_plus(-timedelta(seconds=settings.CONTINUITY_NO_WORKER_ALERT_SECONDS))
    oldest = waiting_messages().filter(created_at__lte=waited).order_by("created_at").first()
    if (
        oldest is None
        or Alert.objects.filter(kind=Alert.Kind.NO_WORKER, acknowledged_at__isnull=True).exists()
    ):
        return False
    count = waiting_messages().count()
    text = (
        f"No worker is running, and {count} message{'s' if count != 1 else ''} wait"
        f"{'' if count != 1 else 's'} to be answered (the oldest since "
        f"{oldest.created_at:%Y-%m-%d %H:%M:%S} UTC). Nothing is answered until a worker "
        "starts; the people waiting are told so."
    )
    if watchdog_alert_raise(Alert.Kind.NO_WORKER, text, subject="No worker is running"):
        waiting_pages_refresh()
    return False


def waiting_messages():
    """People's messages waiting for an answer in conversations the agent answers."""
    return Message.objects.filter(
        role=Message.Role.USER,
        state__in=Message.WAITING_STATES,
        conversation__state=Conversation.State.ACTIVE,
    )


# Pages told at once; past these, a page learns it at its next change or reload.
REFRESHED_PAGES = 500


def waiting_pages_refresh() -> None:
    ids = waiting_messages().values_list("conversation_id", flat=True).distinct()
    for conversation_id in ids[:REFRESHED_PAGES]:
        publish_conversation_changed(conversation_id=conversation_id)


def crash_burst_check() -> int:
    """The crashes within CONTINUITY_CRASH_BURST_SECONDS. At CONTINUITY_CRASH_BURST or more,
    one open alert says so (a crash loop of one conversation pauses it; this is the system's);
    with fewer, it clears by itself."""
    window = db_now_plus(-timedelta(seconds=settings.CONTINUITY_CRASH_BURST_SECONDS))
    crashes = CrashRecord.objects.filter(detected_at__gte=window).count()
    open_alert = Alert.objects.filter(kind=Alert.Kind.CRASH_BURST, acknowledged_at__isnull=True)
    if crashes < settings.CONTINUITY_CRASH_BURST:
        open_alert.update(acknowledged_at=Now())
        return crashes
    if (
        open_alert.exists()
        or Alert.objects.filter(kind=Alert.Kind.CRASH_BURST, acknowledged_at__gte=window).exists()
    ):
        return crashes  # said already for this burst (or acknowledged by staff within it)
    text = (
        f"{crashes} attempts crashed within {settings.CONTINUITY_CRASH_BURST_SECONDS} s, across "
        "conversations: see Crashes and the Workers page (a worker killed again and again, or "
        "a host short of memory)."
    )
    watchdog_alert_raise(Alert.Kind.CRASH_BURST, text, subject="Burst of crashes")
    return crashes


def watchdog_alert_raise(kind: str, text: str, *, subject: str) -> bool:
    """Raise one of the watchdog's alerts (one open per kind: a constraint), log and mail it.
    False when another watchdog raised it meanwhile."""
    try:
        with transaction.atomic():
            Alert.objects.create(kind=kind, text=text)
    except IntegrityError:
        return False
    logger.error(text)
    transaction.on_commit(lambda: alert_mail(subject=subject, text=text))
    return True
