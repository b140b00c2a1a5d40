"""The private redis-server leaves no temporary directory behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools.redis_server import RedisServer

pytestmark = [pytest.mark.django_db, pytest.mark.processes]


def test_restart_and_stop_remove_the_servers_directories():
    server = RedisServer().start()
    first = Path(server.workdir)
    server.restart()
    second = Path(server.workdir)
    assert second.is_dir() and not first.exists()
    server.stop()
    assert not second.exists()
