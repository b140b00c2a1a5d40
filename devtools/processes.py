"""Child processes started by the bench and chaos commands and the test suite: workers, the
watchdog, web servers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from django.conf import settings


def worker_argv(*, node: str, concurrency: int) -> list[str]:
    return [
        sys.executable, "-m", "celery", "-A", "continuity", "worker", "--pool", "prefork",
        "--concurrency", str(concurrency), "--hostname", node, "--loglevel", "INFO",
    ]  # fmt: skip


def watchdog_argv() -> list[str]:
    return [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "watchdog"]


class ChildProcess:
    """A child in its own session (so it can be killed with everything it started), logging to a
    file."""

    def __init__(self, argv: list[str], *, env: dict[str, str], log_path: Path) -> None:
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.popen: subprocess.Popen | None = None

    def start(self) -> ChildProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv, cwd=settings.BASE_DIR, env=self.env, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, "not started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def children(self) -> list[int]:
        path = Path(f"/proc/{self.pid}/task/{self.pid}/children")
        with contextlib.suppress(OSError):
            return [int(pid) for pid in path.read_text().split()]
        return []

    def kill_all(self) -> None:
        """SIGKILL the process and everything it started, as a crashing host would."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.popen.wait()

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM (a planned shutdown), then SIGKILL whatever is left after the timeout."""
        if self.alive():
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout)
        self.kill_all()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class WorkerChild(ChildProcess):
    def __init__(self, *, node: str, concurrency: int, env: dict[str, str], log_path: Path) -> None:
        super().__init__(
            worker_argv(node=node, concurrency=concurrency), env=env, log_path=log_path
        )
        self.node = node


class McpServerChild(ChildProcess):
    """The test MCP server (devtools/mcp_server.py) on `port`, writing every call to `ledger`,
    which outlives its restarts."""

    def __init__(self, *, port: int, ledger: Path, env: dict[str, str], log_path: Path) -> None:
        self.port = port
        self.ledger = ledger
        self.url = f"http://127.0.0.1:{port}/mcp"
        argv = [sys.executable, "-m", "devtools.mcp_server", "--port", str(port)]
        super().__init__([*argv, "--ledger", str(ledger)], env=env, log_path=log_path)

    def answers(self) -> bool:
        return port_answers("127.0.0.1", self.port)


def port_answers(host: str, port: int) -> bool:
    """Whether something accepts connections on the port (a server that is up)."""
    with socket.socket() as probe:
        return probe.connect_ex((host, port)) == 0
