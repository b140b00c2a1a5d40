"""Worker nodes announce themselves so staff can see who is alive."""

from __future__ import annotations

import os
import socket

from django.utils import timezone

from .heartbeats import key_delete, key_refresh, worker_key
from .models import Worker


def worker_announce(*, name: str) -> Worker:
    now = timezone.now()
    worker, _ = Worker.objects.update_or_create(
        name=name,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": now,
            "last_seen_at": now,
            "stopped_at": None,
        },
    )
    key_refresh(worker_key(name))
    return worker


def worker_stopped(*, name: str) -> None:
    Worker.objects.filter(name=name).update(stopped_at=timezone.now())
    key_delete(worker_key(name))
