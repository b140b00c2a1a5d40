"""What a benchmark run stands on: its own PostgreSQL database, its own redis-server, and the
worker, watchdog and web processes it starts (the same ones `make run` supervises)."""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from django.db import connection

from continuity.models import Worker
from continuity.ops.web import web_argv
from devtools.processes import ChildProcess, WorkerChild, watchdog_argv
from devtools.redis_server import RedisServer, free_port, redis_use

from .database import BenchDatabase

T = TypeVar("T")
TASKS_MODULE = "devtools.bench.tasks"
ZERO_THINK = {"CONTINUITY_BUILTIN_TOKEN_DELAY": "0"}


class BenchError(Exception):
    """The run cannot go on (a process did not start, a deadline passed)."""


def wait_for(condition: Callable[[], T], *, timeout: float, what: str, every: float = 0.02) -> T:
    """Poll until `condition()` is truthy and return it; BenchError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        if result := condition():
            return result
        if time.monotonic() > deadline:
            raise BenchError(f"Timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def database_url() -> str:
    """The URL of the database this process uses, for the processes it starts."""
    db = connection.settings_dict
    password = f":{quote(db['PASSWORD'], safe='')}" if db["PASSWORD"] else ""
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return f"postgres://{quote(db['USER'], safe='')}{password}@{host}/{db['NAME']}"


class BenchWorker(WorkerChild):
    """A worker that also imports the baseline's no-op task, so one worker serves every
    section."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.argv = [*self.argv, "--include", TASKS_MODULE]


class Rig:
    """The run's Redis and child processes; `close()` stops every process it started."""

    def __init__(self, database: BenchDatabase) -> None:
        self.database = database
        self.log_dir = Path(tempfile.mkdtemp(prefix="continuity-bench-"))
        self.redis = RedisServer().start()
        redis_use(self.redis.url)
        self.started: list[ChildProcess] = []
        self._shared: WorkerChild | None = None
        self._serial = 0

    def env(self, **overrides: str) -> dict[str, str]:
        return {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get(
                "DJANGO_SETTINGS_MODULE", "continuity.settings"
            ),
            "DATABASE_URL": database_url(),
            "REDIS_URL": self.redis.url,
            "PYTHONUNBUFFERED": "1",
            **ZERO_THINK,
            **overrides,
        }

    def node(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}{self._serial}@{socket.gethostname()}"

    def worker(self, *, node: str, concurrency: int = 2, **env: str) -> WorkerChild:
        """A Celery worker as production runs it (prefork, 2 processes), once it announced
        itself: its start-up scan is over and it takes tasks."""
        worker = BenchWorker(
            node=node, concurrency=concurrency, env=self.env(**env), log_path=self.log(node)
        )
        self.started.append(worker.start())
        wait_for(
            lambda: Worker.objects.filter(name=node, pid=worker.pid, stopped_at=None).exists(),
            timeout=60,
            what=f"worker {node} to announce itself\n{worker.log()[-2000:]}",
            every=0.05,
        )
        return worker

    def shared_worker(self) -> WorkerChild:
        """The zero-think worker that every section without special needs shares."""
        if self._shared is None or not self._shared.alive():
            self._shared = self.worker(node=self.node("bench"))
        return self._shared

    def shared_worker_stop(self) -> None:
        """Before a section runs workers of its own: the shared one would take their tasks."""
        if self._shared is not None:
            self._shared.kill_all()  # idle: a warm shutdown would only cost seconds
            self._shared = None

    def watchdog(self, **env: str) -> ChildProcess:
        watchdog = ChildProcess(watchdog_argv(), env=self.env(**env), log_path=self.log("watchdog"))
        self.started.append(watchdog.start())
        return watchdog

    def web(self, **env: str) -> tuple[ChildProcess, str]:
        """daphne serving the ASGI app (pages, htmx endpoints, websockets); its base URL."""
        port = free_port()
        web = ChildProcess(
            web_argv(host="127.0.0.1", port=port), env=self.env(**env), log_path=self.log("web")
        )
        self.started.append(web.start())

        def answers() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex(("127.0.0.1", port)) == 0

        wait_for(answers, timeout=60, what=f"daphne on port {port}\n{web.log()[-2000:]}")
        return web, f"http://127.0.0.1:{port}"

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name.split('@')[0]}.log"

    def quiet(self) -> bool:
        """No process of the run is alive (in-process counts must not race a worker)."""
        return not any(process.alive() for process in self.started)

    def close(self) -> None:
        for process in reversed(self.started):
            process.kill_all()  # the run is over: nothing of theirs is measured or kept
        self.started.clear()
        self.redis.stop()
