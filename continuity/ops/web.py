"""How the web server is started: by `manage.py serve` (supervisord), the systemd unit, the tests
and the bench."""

from __future__ import annotations

import sys

# Twisted's default listen backlog is 50: a crowd connecting in the same instant overflows it,
# and the connections dropped from the full queue fail as resets. The kernel caps it at somaxconn.
WEB_LISTEN_BACKLOG = 1024


def web_argv(*, host: str, port: int) -> list[str]:
    """daphne serving the ASGI app (pages, htmx endpoints, websockets)."""
    endpoint = f"tcp:port={port}:interface={host}:backlog={WEB_LISTEN_BACKLOG}"
    return [sys.executable, "-m", "daphne", "--endpoint", endpoint, "continuity.asgi:application"]
