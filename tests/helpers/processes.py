"""Real processes for end-to-end and fault tests: Celery workers, the watchdog, the ASGI server."""

from __future__ import annotations

import itertools
import os
import socket
import tempfile
from pathlib import Path

from django.db import connection

from continuity.models import Run, Worker
from continuity.ops.web import web_argv
from devtools.processes import (
    ChildProcess,
    McpServerChild,
    WorkerChild,
    port_answers,
    watchdog_argv,
)
from devtools.redis_server import free_port
from tests.helpers.waiting import wait_for

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
_serial = itertools.count(1)

# Fast clocks for tests; production defaults are in continuity/settings/engine.py.
FAST_CLOCKS = {
    "CONTINUITY_HEARTBEAT_SECONDS": "0.5",
    "CONTINUITY_CRASH_BACKOFF_SECONDS": "0.5,1,2,4",
    "CONTINUITY_REQUEUE_AFTER_SECONDS": "2",
    "CONTINUITY_WATCHDOG_SECONDS": "0.25",
    "CONTINUITY_STREAM_FLUSH_SECONDS": "0.05",
    "CONTINUITY_BUILTIN_TOKEN_DELAY": "0.002",
}


def command_env(**overrides: str) -> dict[str, str]:
    """Environment for a child process on the test database, with the developer tools'
    settings (a `manage.py` command that starts and configures processes of its own: bench,
    chaos), which are the product's with those commands installed.

    Never with DJANGO_ALLOW_ASYNC_UNSAFE (the browser tests' own process sets it): a synchronous
    ORM call in async code must fail in daphne as it does in production."""
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    return {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "devtools.settings",
        "DATABASE_URL": database_url(),
        **overrides,
    }


def process_env(**overrides: str) -> dict[str, str]:
    """Environment for a child process that uses the test database and the session's Redis,
    with the suite's settings and fast clocks."""
    suite = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONUNBUFFERED": "1", **FAST_CLOCKS}
    return command_env(**{**suite, **overrides})


def database_url() -> str:
    """This process's database as a URL, libpq's multi-host form included (the multi-host
    tests' primary and standby)."""
    db = connection.settings_dict
    hosts = (db["HOST"] or "127.0.0.1").split(",")
    ports = str(db["PORT"] or 5432).split(",")
    ports = ports if len(ports) == len(hosts) else ports[:1] * len(hosts)
    netloc = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=True))
    attrs = db["OPTIONS"].get("target_session_attrs")
    query = f"?target_session_attrs={attrs}" if attrs else ""
    return f"postgres://{db['USER']}@{netloc}/{db['NAME']}{query}"


def process_id(run: Run) -> int:
    """The pid of the process that runs (or ran) this attempt."""
    return int(run.worker.rsplit(":", 1)[1])


def artifact(name: str) -> Path:
    return ARTIFACTS / f"{name}-{next(_serial)}.log"


class WorkerProcess(WorkerChild):
    def __init__(self, *, concurrency: int = 2, node: str | None = None, **env: str) -> None:
        node = node or f"test{next(_serial)}-{os.getpid()}@{socket.gethostname()}"
        super().__init__(
            node=node,
            concurrency=concurrency,
            env=process_env(**env),
            log_path=artifact(node.split("@")[0]),
        )

    def start(self, ready_within: float = 30) -> WorkerProcess:
        super().start()
        # This incarnation's own row: a restarted node name finds its predecessor's row there.
        wait_for(
            lambda: Worker.objects.filter(
                name=self.node, hostname=socket.gethostname(), pid=self.pid, stopped_at=None
            ).exists(),
            timeout=ready_within,
            what=f"worker {self.node} to announce itself\n{self.log()[-3000:]}",
        )
        return self


class WatchdogProcess(ChildProcess):
    def __init__(self, **env: str) -> None:
        super().__init__(watchdog_argv(), env=process_env(**env), log_path=artifact("watchdog"))


class WebProcess(ChildProcess):
    def __init__(self, *, port: int | None = None, address: str = "127.0.0.1", **env: str) -> None:
        self.address = address
        self.port = port or free_port()
        self.url = f"http://{address}:{self.port}"
        super().__init__(
            web_argv(host=address, port=self.port),
            env=process_env(**env),
            log_path=artifact("web"),
        )

    def start(self, ready_within: float = 30) -> WebProcess:
        super().start()

        def answers() -> bool:
            return port_answers(self.address, self.port)

        wait_for(answers, timeout=ready_within, what=f"daphne on {self.url}\n{self.log()[-2000:]}")
        return self


class McpServerProcess(McpServerChild):
    """The test MCP server as a child process, on a free port; its ledger a new file in
    test-artifacts, unless the test gives one (to keep it across the server's restarts)."""

    def __init__(self, *, ledger: Path | None = None, port: int | None = None) -> None:
        log_path = artifact("mcp-server")
        if ledger is None:
            ARTIFACTS.mkdir(exist_ok=True)
            ledger = Path(tempfile.mkstemp(prefix="mcp-ledger-", suffix=".jsonl", dir=ARTIFACTS)[1])
        super().__init__(
            port=port or free_port(),
            ledger=ledger,
            env=process_env(),
            log_path=log_path,
        )

    def start(self, ready_within: float = 30) -> McpServerProcess:
        super().start()
        wait_for(self.answers, timeout=ready_within, what=f"the MCP server\n{self.log()[-2000:]}")
        return self
