"""Real processes for end-to-end and fault tests: Celery workers, the watchdog, the ASGI server."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from django.db import connection

from continuity.models import Worker
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
_names = itertools.count(1)

# Fast clocks for tests; production defaults are in continuity/settings.py.
FAST_CLOCKS = {
    "CONTINUITY_HEARTBEAT_SECONDS": "0.5",
    "CONTINUITY_CRASH_BACKOFF_SECONDS": "0.5,1,2,4",
    "CONTINUITY_REQUEUE_AFTER_SECONDS": "2",
    "CONTINUITY_WATCHDOG_SECONDS": "0.25",
    "CONTINUITY_STREAM_FLUSH_SECONDS": "0.05",
    "CONTINUITY_BUILTIN_TOKEN_DELAY": "0.002",
}


def process_env(**overrides: str) -> dict[str, str]:
    """Environment for a child process that uses the test database and the session's Redis."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": database_url(),
        "PYTHONUNBUFFERED": "1",
        **FAST_CLOCKS,
    }
    env.update(overrides)
    return env


def database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


class Process:
    """A child process in its own session, with its output kept as a test artifact."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.popen: subprocess.Popen | None = None
        ARTIFACTS.mkdir(exist_ok=True)
        self.log_path = ARTIFACTS / f"{name}.log"

    def start(self) -> Process:
        log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill_all(self) -> None:
        """SIGKILL the process and everything it started, as a crashing host would."""
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout: float = 20) -> None:
        if not self.alive():
            self.kill_all()
            return
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)
        self.kill_all()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class WorkerProcess(Process):
    def __init__(self, *, concurrency: int = 2, env: dict[str, str] | None = None) -> None:
        self.node = f"test{next(_names)}-{os.getpid()}@{socket.gethostname()}"
        super().__init__(
            self.node.split("@")[0],
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "continuity",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                str(concurrency),
                "--hostname",
                self.node,
                "--without-mingle",
                "--without-gossip",
                "--loglevel",
                "INFO",
            ],
            env or process_env(),
        )

    def start(self, ready_within: float = 30) -> WorkerProcess:
        started = time.time()
        super().start()
        wait_for(
            lambda: Worker.objects.filter(
                name=self.node,
                started_at__gte=datetime.fromtimestamp(started - 1, tz=UTC),
                stopped_at=None,
            ).exists(),
            timeout=ready_within,
            what=f"worker {self.node} to announce itself\n{self.log()[-3000:]}",
        )
        return self

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        return [int(pid) for pid in path.read_text().split()] if path.exists() else []


class WatchdogProcess(Process):
    def __init__(self, env: dict[str, str] | None = None) -> None:
        super().__init__(
            f"watchdog-{next(_names)}",
            [sys.executable, "manage.py", "watchdog"],
            env or process_env(),
        )


class WebProcess(Process):
    def __init__(self, env: dict[str, str] | None = None) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        super().__init__(
            f"web-{next(_names)}",
            [
                sys.executable,
                "-m",
                "daphne",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "continuity.asgi:application",
            ],
            env or process_env(),
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, ready_within: float = 30) -> WebProcess:
        super().start()

        def answers() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(answers, timeout=ready_within, what=f"daphne on {self.url}\n{self.log()[-2000:]}")
        return self
