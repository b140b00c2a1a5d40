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
from pathlib import Path

import redis
from django.db.models.functions import Now

from ..models import Worker
from .heartbeats import (
    key_delete,
    key_refresh,
    key_set,
    keys_alive,
    redis_client,
    run_key,
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
