"""Chaos runs: traffic against real workers while they are SIGKILLed, then an audit of the result.

The audit (`chaos_audit`) reads only the database, so it judges any run, however it was made.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from django.db.models import Count

from continuity.models import Conversation, Message, Run, ToolCall

from .fake_model import FakeOpenAI
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
    held = users.filter(conversation__in=paused, state__in=Message.WAITING_STATES).count()
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
    # Seconds between two kills, drawn uniformly from this range; (0, 0): no kills.
    kill_every: tuple[float, float] = (3.0, 5.0)
    rng: random.Random = field(default_factory=random.Random)
    kills: dict[str, int] = field(default_factory=lambda: {"child": 0, "worker": 0, "respawned": 0})
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
        if max(self.kill_every) <= 0:
            return
        while not self._stop.wait(self.rng.uniform(*self.kill_every)):
            self.respawn_dead()
            self.strike()

    def respawn_dead(self) -> None:
        """Start again, as supervisord does, a worker that ended by itself: Celery ends a worker
        whose pool process is killed while the pool starts ("Could not start worker
        processes")."""
        for index, worker in enumerate(self.running):
            if not worker.alive():
                self.running[index] = self.spawn(worker.node)
                self.kills["respawned"] += 1

    def strike(self) -> None:
        """Kill one pool process (three times in four) or one whole worker, among the workers
        that run a pool: one still starting has none yet, and killing it again and again made
        whole-worker kills nearly as many as the others, and most processes fresh ones."""
        serving = [index for index, worker in enumerate(self.running) if worker.children()]
        if not serving:
            return
        index = self.rng.choice(serving)
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


class Scheduled:
    """Calls `action` at each of the offsets `at` (seconds after `start`), on a thread, until
    stopped; `count` says how many calls were made."""

    def __init__(self, action, at: list[float]) -> None:
        self.action, self.at, self.count = action, sorted(at), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.loop, name="scheduled", daemon=True)

    def loop(self) -> None:
        started = time.monotonic()
        for offset in self.at:
            if self._stop.wait(max(0.0, started + offset - time.monotonic())):
                return
            self.action()
            self.count += 1

    def start(self) -> Scheduled:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def spread(count: int, over: float) -> list[float]:
    """`count` moments spread evenly inside `over` seconds (none at its ends)."""
    return [over * (index + 1) / (count + 1) for index in range(count)]


class ModelOutage:
    """The fake model server down for `seconds`, then back on the same port (its clients find
    it where they left it)."""

    def __init__(self, server: FakeOpenAI, seconds: float) -> None:
        self.server, self.seconds = server, seconds

    def __call__(self) -> None:
        port = self.server.server.server_address[1]
        self.server.stop()
        time.sleep(self.seconds)
        self.server.start(port=port)


# What each reply's first round asks for in a `--tools` run: a tool neither read-only nor
# idempotent (whose ledger counts its runs per key), an idempotent one and a read-only one.
CHAOS_TOOL_CALLS = (
    ("ledger_append", {"entry": "chaos"}),
    ("set_value", {"name": "chaos", "value": "1"}),
    ("lookup", {"word": "ledger"}),
)


def tools_audit(
    conversation_ids: list[int], ledger: Path, *, run_again: Counter[str], decided: Counter[str]
) -> dict:
    """The tool calls of a `--tools` run, against the MCP server's ledger: how often each key of
    the tool that is neither read-only nor idempotent ran, and how many of them ran more often
    than its first run and the people's Run again (`run_again`: how often each key was chosen,
    counted as it was posted, since a call in doubt twice keeps only its last decision) allow
    (the promise: none)."""
    from devtools.mcp_server import ledger_lines

    calls = ToolCall.objects.filter(message__conversation_id__in=conversation_ids)
    runs_per_key = Counter(
        line["key"] for line in ledger_lines(ledger) if line["tool"] == "ledger_append"
    )
    unsafe = calls.filter(tool="ledger_append")
    return {
        "calls": calls.count(),
        "states": dict(
            calls.values_list("state").annotate(n=Count("pk")).values_list("state", "n")
        ),
        "decided_in_doubt": calls.exclude(decision="").count(),
        "still_in_doubt": calls.filter(state=ToolCall.State.IN_DOUBT).count(),
        "run_again_chosen": sum(run_again.values()),
        "decided_twice": sum(1 for times in decided.values() if times > 1),
        "ledger_append_calls": unsafe.count(),
        "ledger_append_runs_per_key": dict(sorted(Counter(runs_per_key.values()).items())),
        "keys_run_more_than_chosen": sum(
            1 for key, runs in runs_per_key.items() if runs > 1 + run_again[key]
        ),
        "keys_run_thrice_or_more": sum(1 for runs in runs_per_key.values() if runs > 2),
    }


class Deciding:
    """The people of a run, deciding on their calls in doubt as the page lets them: Run again or
    Skip, at random, through the web server, once a second."""

    def __init__(self, browsers: Browsers, conversation_ids: list[int], rng: random.Random):
        self.browsers, self.conversation_ids = browsers, conversation_ids
        self.rng = random.Random(rng.random())
        # By call key, what the server took: every decision, and every Run again.
        self.decided: Counter[str] = Counter()
        self.run_again: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.loop, name="deciding", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def loop(self) -> None:
        from django.db import InterfaceError, OperationalError, connection

        while not self._stop.wait(1.0):
            try:
                doubted = list(
                    ToolCall.objects.filter(
                        message__conversation_id__in=self.conversation_ids,
                        state=ToolCall.State.IN_DOUBT,
                    ).values_list("message__conversation_id", "pk", "key")
                )
            except (OperationalError, InterfaceError):  # a database restart
                connection.close()
                continue
            for conversation_id, call_id, key in doubted:
                choice = self.rng.choice(["run_again", "skip"])
                if self.browsers.decide(conversation_id, call_id, choice):
                    self.decided[str(key)] += 1
                    self.run_again[str(key)] += choice == "run_again"


class Browsers:
    """Each conversation's owner, signed in over HTTP as a browser is: a session cookie, the
    CSRF cookie and token of its conversation's page. Sends as the composer does: a 5xx or a
    lost connection is sent again with the same client id, a 429 after its Retry-After; every
    status is counted."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.cookies: dict[int, str] = {}  # by conversation id
        self.tokens: dict[int, str] = {}
        self.statuses: Counter[str] = Counter()
        self.lock = threading.Lock()  # browsers send from several threads

    def sign_in(self, conversation: Conversation) -> None:
        from django.conf import settings
        from django.test import Client

        client = Client()
        client.force_login(conversation.owner)
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        cookie = f"{settings.SESSION_COOKIE_NAME}={session}"
        request = urllib.request.Request(
            f"{self.base_url}/c/{conversation.pk}/", headers={"Cookie": cookie}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            html = response.read().decode()
            csrf = re.search(r"csrftoken=([^;]+)", response.headers["Set-Cookie"]).group(1)
        self.cookies[conversation.pk] = f"{cookie}; csrftoken={csrf}"
        self.tokens[conversation.pk] = re.search(r'"X-CSRFToken": "([^"]+)"', html).group(1)

    def headers(self, conversation_id: int) -> dict[str, str]:
        """What the page's htmx sends with a POST: its session, its CSRF token."""
        return {
            "Cookie": self.cookies[conversation_id],
            "HX-Request": "true",
            "X-CSRFToken": self.tokens[conversation_id],
            "Referer": self.base_url,
        }

    def send(self, conversation_id: int, text: str) -> None:
        body = urllib.parse.urlencode({"text": text, "client_id": str(uuid.uuid4())}).encode()
        headers = self.headers(conversation_id)
        url = f"{self.base_url}/c/{conversation_id}/messages/"
        while True:
            request = urllib.request.Request(url, data=body, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    self.count(str(response.status))
                    return
            except urllib.error.HTTPError as error:
                self.count(str(error.code))
                wait = float(error.headers.get("Retry-After") or 0.2)
                if error.code != 429 and error.code < 500:
                    raise
            except OSError as error:  # refused or reset: the web server is away
                self.count(type(error).__name__)
                wait = 0.2
            time.sleep(wait)

    def decide(self, conversation_id: int, call_id: int, choice: str) -> bool:
        """Run again or Skip on a call in doubt, as its block's buttons post it; whether the
        server took it. A 409 (decided already) is as good as done, a 5xx or a lost connection
        is tried at the next round."""
        body = urllib.parse.urlencode({"choice": choice}).encode()
        headers = self.headers(conversation_id)
        url = f"{self.base_url}/c/{conversation_id}/tool-calls/{call_id}/decide/"
        request = urllib.request.Request(url, data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                self.count(f"decide {response.status}")
                return True
        except urllib.error.HTTPError as error:
            self.count(f"decide {error.code}")
        except OSError as error:
            self.count(f"decide {type(error).__name__}")
        return False

    def count(self, status: str) -> None:
        with self.lock:
            self.statuses[status] += 1

    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status.startswith("5"))
