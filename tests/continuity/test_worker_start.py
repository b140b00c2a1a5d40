"""What a worker's start costs: the MCP SDK is imported only where a server is registered
(its import took over a second of each process's start-up), and then before the pool forks."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings
from django.db import DatabaseError

from continuity.models import McpServer
from continuity.tools import registry

STARTUP = """
import sys, django
django.setup()
import continuity.worker.signals, continuity.worker.tasks, continuity.asgi
print(sorted({name.split(".")[0] for name in sys.modules} & {"mcp", "mcp_types"}))
"""


@pytest.mark.processes
def test_starting_a_worker_or_the_web_server_does_not_import_the_mcp_sdk():
    result = subprocess.run(
        [sys.executable, "-c", STARTUP],
        cwd=settings.BASE_DIR,
        env={
            "DJANGO_SETTINGS_MODULE": "continuity.settings",
            "DATABASE_URL": "sqlite://:memory:",
            "SECRET_KEY": "startup",
            "PATH": "/usr/bin:/bin",
        },  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


@pytest.fixture
def sdk_imports(monkeypatch):
    imports = []
    monkeypatch.setattr(registry, "sdk_import", lambda: imports.append(True))
    registry.tools_forget()
    yield imports
    registry.tools_forget()


@pytest.mark.django_db(transaction=True)
def test_a_worker_imports_the_sdk_before_forking_only_when_a_server_is_registered(
    sdk_imports, settings
):
    settings.CONTINUITY_MCP_SERVERS = []
    registry.tools_ready()
    assert sdk_imports == []

    McpServer.objects.create(name="ledger", url="http://127.0.0.1:9/mcp", enabled=True)
    registry.tools_forget()
    registry.tools_ready()
    assert sdk_imports == [True]


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_cannot_read_its_servers_imports_the_sdk(sdk_imports, monkeypatch):
    def unreadable():
        raise DatabaseError("the database is away")

    monkeypatch.setattr(registry, "servers_registered", unreadable)
    registry.tools_ready()
    assert sdk_imports == [True]
