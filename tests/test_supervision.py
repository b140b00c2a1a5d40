"""`manage.py serve` (what `make run` starts): supervisord restarts a program that dies, and the
others keep running. Real supervisord, real signals, the session's real Redis."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from continuity.delivery.inbox import message_accept
from continuity.models import Message, Worker
from devtools.processes import ChildProcess
from devtools.redis_server import free_port
from tests.helpers.factories import ConversationFactory, UserFactory
from tests.helpers.processes import artifact, process_env
from tests.helpers.redis_server import session_redis_server
from tests.helpers.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.fault, pytest.mark.django_db(transaction=True)]

LONG_REPLY = "Hi, my name is Ada, my goal is to finish the migration, and I like tea."
SUPERVISORCTL = str(Path(sys.executable).parent / "supervisorctl")


class Serve(ChildProcess):
    """`manage.py serve` in its own session; it execs supervisord, so this pid is supervisord's."""

    def __init__(self, run_dir: Path, *, workers: int = 1, **env: str) -> None:
        self.port = free_port()
        self.log_while_refusing = ""
        self.url = f"http://127.0.0.1:{self.port}/accounts/login/"
        self.config = run_dir / "supervisord.conf"
        super().__init__(
            [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "serve",
             "--workers", str(workers)],
            # The port comes from PORT, as with `make run PORT=8001`.
            env=process_env(CONTINUITY_VAR_DIR=str(run_dir), PORT=str(self.port), **env),
            log_path=artifact("serve"),
        )  # fmt: skip

    def start(self) -> Serve:
        super().start()
        wait_for(
            self.ready,
            timeout=90,
            what=f"the web server under supervisord\n{self.log()[-3000:]}",
            every=0.2,
        )
        return self

    def ready(self) -> bool:
        """Whether the web server answers; until it listens, what serve printed meanwhile is
        kept (`log_while_refusing`: read before each refused connection)."""
        log = self.log()
        if not accepts(self.port):
            self.log_while_refusing = log
            return False
        return self.status() == 200

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM to supervisord stops the programs in order; SIGKILL whatever outlives it."""
        if self.alive():
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        for pid in self.session_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.kill_all()

    def status(self) -> int | str:
        try:
            with urllib.request.urlopen(self.url, timeout=3) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError as error:
            return repr(error)

    def program_pid(self, name: str) -> int:
        """The pid supervisord reports for a program; 0 while it is not running."""
        result = subprocess.run(
            [SUPERVISORCTL, "-c", str(self.config), "pid", name],
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        return int(result.stdout) if result.stdout.strip().isdigit() else 0

    def session_pids(self) -> set[int]:
        """Every process of this session: supervisord, its programs and their children."""
        pids = set()
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == self.pid and fields[0] != "Z":  # session id, state
                pids.add(int(stat.parent.name))
        return pids


@pytest.fixture
def serve(tmp_path, processes):
    def start(**options) -> Serve:
        return processes.add(Serve(tmp_path, **options), stop_after=True)

    return start


def announced(node_prefix: str, pid: int) -> bool:
    return Worker.objects.filter(name__startswith=node_prefix, pid=pid, stopped_at=None).exists()


class Poller(threading.Thread):
    """Asks the web server for a page every 100 ms and records each answer."""

    def __init__(self, server: Serve) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.answers: list[int | str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.answers.append(self.server.status())
            self.done.wait(0.1)

    def stop(self) -> list[int | str]:
        self.done.set()
        self.join()
        return self.answers


def test_a_killed_worker_is_restarted_while_the_web_server_keeps_answering(serve):
    server = serve()
    worker_pid = wait_for(
        lambda: server.program_pid("worker1"), timeout=30, what="worker1 to be running"
    )
    wait_for(lambda: announced("worker1@", worker_pid), timeout=60, what="worker1 to announce")
    web_pid = server.program_pid("web")
    poller = Poller(server)
    poller.start()

    os.kill(worker_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    new_pid = wait_for(
        lambda: (
            server.program_pid("worker1") not in (0, worker_pid) and server.program_pid("worker1")
        ),
        timeout=15,
        what=f"supervisord to restart worker1\n{server.log()[-3000:]}",
    )
    wait_for(lambda: announced("worker1@", new_pid), timeout=30, what="the new worker1")
    back_in = time.monotonic() - killed_at
    answers = poller.stop()

    assert back_in < 15
    assert answers and set(answers) == {200}, answers
    assert server.program_pid("web") == web_pid  # the web server never stopped
    assert "exited: worker1 (terminated by SIGKILL; not expected)" in server.log()


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_serve_says_where_once_the_web_server_listens_and_supervisord_does_not_warn(serve):
    server = serve()
    address = f"Continuity on http://127.0.0.1:{server.port}/"

    log = wait_for(lambda: address in server.log() and server.log(), timeout=10, what=address)
    assert address not in server.log_while_refusing, "announced before the web server listened"
    assert server.log_while_refusing  # it was seen refusing: the check above had a window
    assert log.count(address) == 1
    assert " CRIT " not in log, log[-3000:]
    status = subprocess.run(
        [SUPERVISORCTL, "-c", str(server.config), "status", "web"],
        capture_output=True, text=True, timeout=10,
    )  # fmt: skip
    assert "RUNNING" in status.stdout, status.stdout + status.stderr


def test_stopping_supervisord_stops_every_program(serve):
    server = serve()
    wait_for(lambda: server.program_pid("worker1"), timeout=30, what="worker1 to be running")
    wait_for(
        lambda: len(server.session_pids()) >= 5,  # supervisord, web, worker + pool, watchdog
        timeout=30,
        what="all programs to start",
    )

    server.signal(signal.SIGTERM)
    server.popen.wait(timeout=60)

    assert server.session_pids() == set()


def test_redis_restarts_under_busy_workers_leave_every_worker_running(serve):
    server = serve(workers=2, CONTINUITY_BUILTIN_TOKEN_DELAY="0.05")
    owner = UserFactory()
    chats = [ConversationFactory(owner=owner) for _ in range(4)]
    for _ in range(3):
        for program in ("worker1", "worker2"):
            wait_for(
                lambda p=program: announced(f"{p}@", server.program_pid(p)),
                timeout=60,
                what=f"{program} to be running and announced\n{server.log()[-3000:]}",
            )
        sent = [
            message_accept(conversation=c, text=LONG_REPLY, client_id=uuid.uuid4())
            for c in chats
        ]  # fmt: skip
        wait_streaming(sent[0])
        session_redis_server().restart()
        wait_for(
            lambda ids=[m.pk for m in sent]: (
                not Message.objects.filter(pk__in=ids, state__in=Message.WAITING_STATES).exists()
            ),
            timeout=90,
            what="the messages sent before the restart to be answered",
            every=0.2,
        )

    # Whether a worker survived the restarts or exited and was restarted, both are running now.
    for program in ("worker1", "worker2"):
        pid = server.program_pid(program)
        assert pid and announced(f"{program}@", pid), server.log()[-3000:]
    assert server.program_pid("web")
