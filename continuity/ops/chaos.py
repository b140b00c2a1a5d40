"""Chaos runs: traffic against real workers while they are SIGKILLed, then an audit of the result.

The audit (`chaos_audit`) reads only the database, so it judges any run, however it was made.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from django.db.models import Count

from ..models import Conversation, Message, Run
from .processes import WorkerChild


def chaos_audit(*, conversation_ids: list[int], sent: int) -> dict:
    """What happened to the messages of these conversations: the promise, checked."""
    users = Message.objects.filter(conversation_id__in=conversation_ids, role=Message.Role.USER)
    states = dict(users.values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
    replies = Message.objects.filter(
        conversation_id__in=conversation_ids, role=Message.Role.ASSISTANT
    )
    completed = Run.objects.filter(conversation_id__in=conversation_ids, state=Run.State.COMPLETED)
    # The unique constraints should make the first two impossible; the audit checks anyway, and
    # the third catches a message answered twice whose second reply the database refused.
    duplicates = (
        surplus(replies.values("reply_to"))
        + surplus(users.values("conversation", "client_id"))
        + surplus(completed.values("message"))
    )
    done, dead = states.get(Message.State.DONE, 0), states.get(Message.State.DEAD, 0)
    runs = Run.objects.filter(conversation_id__in=conversation_ids)
    paused = Conversation.objects.filter(pk__in=conversation_ids, state=Conversation.State.PAUSED)
    # Stored and waiting for staff to resume their conversation: kept, not lost.
    held = users.filter(conversation__in=paused, state__in=Message.PENDING_STATES).count()
    return {
        "sent": sent,
        "done": done,
        "dead": dead,
        "held_by_pause": held,
        "lost": sent - done - dead - held,
        "duplicates": duplicates,
        "out_of_order": out_of_order(replies),
        "paused": paused.count(),
        "attempts": dict(
            runs.values_list("state").annotate(n=Count("pk")).values_list("state", "n")
        ),
        "max_recovery_seconds": max_recovery_seconds(conversation_ids),
    }


def surplus(grouped) -> int:
    """Rows beyond the first in each group of a `.values(...)` queryset."""
    return sum(n - 1 for n in grouped.annotate(n=Count("pk")).values_list("n", flat=True) if n > 1)


def out_of_order(replies) -> int:
    """Replies (in creation order) that answer an earlier message than the reply before them."""
    answered: dict[int, list[int]] = defaultdict(list)
    for conversation_id, reply_to_id in replies.order_by("id").values_list(
        "conversation_id", "reply_to_id"
    ):
        answered[conversation_id].append(reply_to_id)
    return sum(1 for ids in answered.values() for before, after in pairwise(ids) if after < before)


def max_recovery_seconds(conversation_ids: list[int]) -> float:
    """Longest time from an attempt's last sign of life to the start of the next attempt."""
    runs = Run.objects.filter(conversation_id__in=conversation_ids).order_by("message_id", "id")
    longest = 0.0
    previous: Run | None = None
    for run in runs.only("message_id", "state", "heartbeat_at", "started_at"):
        if previous is not None and previous.message_id == run.message_id:
            longest = max(longest, (run.started_at - previous.heartbeat_at).total_seconds())
        previous = run
    return round(longest, 2)


@dataclass
class Chaos:
    """Keeps `workers` Celery workers running while killing their processes at random."""

    env: dict[str, str]
    log_dir: Path
    workers: int = 2
    concurrency: int = 2
    kill_every: float = 3.0
    rng: random.Random = field(default_factory=random.Random)
    kills: dict[str, int] = field(default_factory=lambda: {"child": 0, "worker": 0})
    running: list[WorkerChild] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        for index in range(self.workers):
            self.running.append(self.spawn(f"chaos{index}@{socket.gethostname()}"))
        self._thread = threading.Thread(target=self.loop, name="chaos", daemon=True)
        self._thread.start()

    def spawn(self, node: str) -> WorkerChild:
        log = self.log_dir / f"{node.split('@')[0]}.log"
        worker = WorkerChild(node=node, concurrency=self.concurrency, env=self.env, log_path=log)
        return worker.start()

    def loop(self) -> None:
        if self.kill_every <= 0:
            return
        while not self._stop.wait(self.rng.expovariate(1 / self.kill_every)):
            self.strike()

    def strike(self) -> None:
        index = self.rng.randrange(len(self.running))
        worker = self.running[index]
        children = worker.children()
        if children and self.rng.random() < 0.75:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.rng.choice(children), signal.SIGKILL)
            self.kills["child"] += 1
        else:
            worker.kill_all()
            self.kills["worker"] += 1
            # Same node name: its start-up scan reaps what the killed incarnation left.
            self.running[index] = self.spawn(worker.node)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for worker in self.running:
            worker.stop()


def wait_until(condition, *, timeout: float, every: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return bool(condition())


def postgres_restart() -> None:
    """Crash-like restart of the local PostgreSQL cluster: `-m immediate` skips the clean
    shutdown, so the server recovers from its WAL at start, as after a power cut."""
    version = sorted(path.name for path in Path("/etc/postgresql").iterdir())[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"]
        + ["-m", "immediate"],
        check=True,
        capture_output=True,
        timeout=120,
    )


class Restarts:
    """Calls `restart` every `every` seconds (never when 0) on a thread until stopped."""

    def __init__(self, restart, every: float) -> None:
        self.restart, self.every, self.count = restart, every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.loop, name="restarts", daemon=True)

    def loop(self) -> None:
        while self.every > 0 and not self._stop.wait(self.every):
            self.restart()
            self.count += 1

    def start(self) -> Restarts:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
