"""Which tools the agent may call now: the built-in ones, and those of the enabled MCP servers
(registered in the admin, or in CONTINUITY_MCP_SERVERS), with the admin's hint overrides.

A server's tool list is kept for CONTINUITY_MCP_TOOLS_TTL seconds per process. A server that
cannot say what it offers is an infrastructure fault: its tools are left out of the round, and
the model is told (`Toolbox.note`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.core.signals import setting_changed
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from ..brains import ToolSpec
from ..errors import ToolServerDown
from ..models import McpServer
from .builtin import BUILTIN, BUILTIN_TOOLS
from .servers import server_tools

logger = logging.getLogger(__name__)

HINTS = ("read_only", "idempotent", "destructive", "open_world")
# How long listing a server's tools may take before it is taken as down for this round.
LIST_TIMEOUT = 5.0


@dataclass(frozen=True)
class Server:
    name: str
    location: str  # a streamable HTTP URL, or a command line (stdio)
    allowed: tuple[str, ...] = ()  # empty: every tool it offers
    hints: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    source: str  # BUILTIN, or the MCP server's name
    location: str = ""  # the MCP server's: its URL or its command


@dataclass(frozen=True)
class Toolbox:
    tools: dict[str, Tool]
    note: str = ""  # what the model is told: servers down
    down: tuple[str, ...] = ()  # the servers that could not say what they offer

    @property
    def specs(self) -> list[ToolSpec]:
        return [tool.spec for tool in self.tools.values()]


# How long this process uses the servers it read from the admin's table: a reply does not pay a
# query for them, and a server staff add or disable is in use within this many seconds.
REGISTRY_READ_SECONDS = 10.0
_registered: list[tuple[float, list[Server]]] = []


def servers_registered() -> list[Server]:
    """The enabled servers: the admin's, then the settings' (a name in both is the admin's)."""
    if _registered and time.monotonic() - _registered[0][0] < REGISTRY_READ_SECONDS:
        return _registered[0][1]
    servers = [
        Server(server.name, server.location, tuple(server.allowed_tools or ()), server.hints or {})
        for server in McpServer.objects.filter(enabled=True)
    ]
    named = {server.name for server in servers}
    for entry in settings.CONTINUITY_MCP_SERVERS:
        location = entry.get("url") or entry.get("command")
        if entry.get("name") and location and entry["name"] not in named:
            servers.append(Server(entry["name"], location, tuple(entry.get("tools") or ()), {}))
    _registered[:] = [(time.monotonic(), servers)]
    return servers


# This process's tool lists, by server URL: (when they were read on the monotonic clock, specs).
_listed: dict[str, tuple[float, list[ToolSpec]]] = {}


def server_specs(server: Server) -> list[ToolSpec]:
    """The server's tools, from this process's list while it is fresh. ToolServerDown when it
    cannot say."""
    read_at, specs = _listed.get(server.location, (0.0, []))
    if not specs or time.monotonic() - read_at >= settings.CONTINUITY_MCP_TOOLS_TTL:
        specs = server_tools(server.location, timeout=LIST_TIMEOUT)
        _listed[server.location] = (time.monotonic(), specs)
    return specs


def tools_forget(location: str = "") -> None:
    """Read the server's tools (every server's and the registry, without a location) again at
    their next use: its list changed."""
    if location:
        _listed.pop(location, None)
    else:
        _listed.clear()
        _registered.clear()


@receiver(post_save, sender=McpServer)
@receiver(post_delete, sender=McpServer)
@receiver(setting_changed)
def registry_changed(**kwargs) -> None:
    tools_forget()


def hinted(spec: ToolSpec, hints: dict) -> ToolSpec:
    """The spec with the admin's overrides of its hints."""
    overrides = {hint: bool(value) for hint, value in hints.items() if hint in HINTS}
    return replace(spec, **overrides) if overrides else spec


def toolbox() -> Toolbox:
    """The tools offered now. A built-in name wins over a server's tool of the same name, and
    the first server over a later one."""
    tools = {name: Tool(tool.spec, BUILTIN) for name, tool in BUILTIN_TOOLS.items()}
    down = []
    for server in servers_registered():
        try:
            specs = server_specs(server)
        except ToolServerDown as exc:
            logger.warning("MCP server %s left out of this round: %s", server.name, exc)
            down.append(server.name)
            continue
        for spec in specs:
            if (server.allowed and spec.name not in server.allowed) or spec.name in tools:
                continue
            tools[spec.name] = Tool(
                hinted(spec, server.hints.get(spec.name, {})), server.name, server.location
            )
    note = ""
    if down:
        note = (
            f"The tool server(s) {', '.join(down)} cannot be reached now: their tools are not "
            "available in this reply. Say so if the person asked for something they do."
        )
    return Toolbox(tools, note, tuple(down))
