"""The test session's private redis-server, so fault tests may restart or flush it freely."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
from collections.abc import Iterator

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devtools.redis_server import RedisServer, free_port

# One per pytest process: each of pytest-xdist's workers (PYTEST_XDIST_WORKER, which the
# processes a test starts inherit too) has its own, as it has its own test database.
URL_ENV = "CONTINUITY_TEST_REDIS_URL" + os.environ.get("PYTEST_XDIST_WORKER", "").upper()
_server: RedisServer | None = None


def session_redis_url() -> str:
    """Started once by the pytest process; its subprocesses inherit the URL through the env."""
    global _server
    if URL_ENV in os.environ:
        return os.environ[URL_ENV]
    _server = RedisServer().start()
    atexit.register(_server.stop)
    os.environ[URL_ENV] = _server.url
    return _server.url


def session_redis_server() -> RedisServer:
    if _server is None:
        raise RuntimeError("This process did not start the session's redis-server.")
    return _server


@contextlib.contextmanager
def session_redis_stalled() -> Iterator[None]:
    """The session's redis-server frozen (SIGSTOP) for the block, as a stalled Redis is: the
    kernel still accepts connections and commands, and nothing is answered until it goes on."""
    pid = session_redis_server().process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def refusing_redis() -> redis.Redis:
    """A client of a Redis that is not there (nothing listens on its port), which says so at
    once: no retries (redis-py retries three times with a backoff by default, seconds per
    command) and a short connect timeout."""
    return redis.Redis(port=free_port(), socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
