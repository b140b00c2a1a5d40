"""Which tools the agent may call now: the built-in ones, and those of the enabled MCP servers
(registered in the admin, or in CONTINUITY_MCP_SERVERS), with the admin's hint overrides.

A server's tool list is kept for CONTINUITY_MCP_TOOLS_TTL seconds per process, or until the
server says it changed: each process listens to each HTTP server whose tools it read (MCP's
`subscriptions/listen`). A server that cannot say what it offers is an infrastructure fault:
its tools are left out of the round, and the model is told (`Toolbox.note`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field, replace

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from ..brains import ToolSpec
from ..errors import ToolServerDown
from ..models import McpServer, ToolPolicy, ToolServerStatus
from .builtin import BUILTIN, BUILTIN_TOOLS
from .servers import sdk_import, server_tools, tools_changes

logger = logging.getLogger(__name__)

HINTS = ("read_only", "idempotent", "destructive", "open_world")
# How long listing a server's tools may take before it is taken as down for this round.
LIST_TIMEOUT = 5.0


@dataclass(frozen=True)
class Policy:
    """Staff's decisions for one tool (ToolPolicy): when its calls wait for the person's
    approval, and how many seconds one may take (None: the server's)."""

    approval: str = ToolPolicy.Approval.IF_DESTRUCTIVE
    time_limit: float | None = None


@dataclass(frozen=True)
class Server:
    name: str
    location: str  # a streamable HTTP URL, or a command line (stdio)
    allowed: tuple[str, ...] = ()  # empty: every tool it offers
    hints: dict = field(default_factory=dict)
    policies: dict[str, Policy] = field(default_factory=dict)
    time_limit: float | None = None  # None: CONTINUITY_TOOL_TIMEOUT


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    source: str  # BUILTIN, or the MCP server's name
    location: str = ""  # the MCP server's: its URL or its command
    policy: Policy = Policy(ToolPolicy.Approval.NEVER)
    server_time_limit: float | None = None

    @property
    def asks_first(self) -> bool:
        """Whether a call waits for the person's approval before it runs. A built-in tool
        never asks: it reads and writes only the asking person's own notes, exactly once."""
        match self.policy.approval:
            case ToolPolicy.Approval.ALWAYS:
                return True
            case ToolPolicy.Approval.NEVER:
                return False
        return self.spec.destructive and not self.spec.read_only

    @property
    def time_limit(self) -> float:
        """Seconds a call may take: the tool's policy, else its server's, else the setting."""
        for limit in (self.policy.time_limit, self.server_time_limit):
            if limit:
                return float(limit)
        return float(settings.CONTINUITY_TOOL_TIMEOUT)


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
        Server(
            server.name,
            server.location,
            tuple(server.allowed_tools or ()),
            server.hints or {},
            {
                policy.tool: Policy(policy.approval, policy.time_limit)
                for policy in server.policies.all()
            },
            server.time_limit,
        )
        for server in McpServer.objects.filter(enabled=True).prefetch_related("policies")
    ]
    named = {server.name for server in servers}
    for entry in settings.CONTINUITY_MCP_SERVERS:
        location = entry.get("url") or entry.get("command")
        if entry.get("name") and location and entry["name"] not in named:
            servers.append(
                Server(
                    entry["name"],
                    location,
                    tuple(entry.get("tools") or ()),
                    {},
                    policies_of(entry.get("policies") or {}),
                    entry.get("time_limit"),
                )
            )
    _registered[:] = [(time.monotonic(), servers)]
    return servers


def tools_ready() -> None:
    """Import the MCP SDK now if a server is registered, or if the database cannot say: a
    worker does before it forks its pool, so that no pool process pays the import in a call."""
    try:
        registered = bool(servers_registered())
    except DatabaseError:
        registered = True
    finally:
        connection.close()  # the pool's processes must not share it
    if registered:
        sdk_import()


def policies_of(configured: dict) -> dict[str, Policy]:
    """CONTINUITY_MCP_SERVERS' "policies", by tool: {"approval": "never", "time_limit": 30}."""
    approvals = set(ToolPolicy.Approval.values)
    return {
        tool: Policy(
            said.get("approval") if said.get("approval") in approvals else Policy.approval,
            said.get("time_limit"),
        )
        for tool, said in configured.items()
        if isinstance(said, dict)
    }


# This process's tool lists, by server URL: (when they were read on the monotonic clock, specs).
_listed: dict[str, tuple[float, list[ToolSpec]]] = {}


def server_specs(server: Server) -> list[ToolSpec]:
    """The server's tools, from this process's list while it is fresh. ToolServerDown when it
    cannot say."""
    read_at, specs = _listed.get(server.location, (0.0, []))
    if not specs or time.monotonic() - read_at >= settings.CONTINUITY_MCP_TOOLS_TTL:
        specs = server_tools(server.location, timeout=LIST_TIMEOUT)
        _listed[server.location] = (time.monotonic(), specs)
        changes_watch(server.location)
    return specs


# Each process listens to the servers whose tools it read, one thread each (by pid and
# location: a forked pool process starts its own), until the registry is read anew.
_watchers: dict[tuple[int, str], threading.Thread] = {}
_listening: set[tuple[int, str]] = set()
_generation = [0]
# How long a watcher waits before it listens again after its stream ended or failed.
LISTEN_AGAIN_SECONDS = 5.0


def changes_watch(location: str) -> None:
    """Listen to the server for changes of its tool list: each forgets its list, read again at
    the next round. A stdio server is not listened to (a session is a process of its own)."""
    key = (os.getpid(), location)
    if not location.startswith(("http://", "https://")):
        return
    if (watcher := _watchers.get(key)) is not None and watcher.is_alive():
        return
    generation = _generation[0]
    _watchers[key] = threading.Thread(
        target=changes_listen, args=(location, generation), daemon=True, name="mcp-tools-listen"
    )
    _watchers[key].start()


def changes_listen(location: str, generation: int) -> None:
    from mcp.client.subscriptions import ListenNotSupportedError

    key = (os.getpid(), location)

    def stale() -> bool:
        return _generation[0] != generation

    while not stale():
        try:
            tools_changes(
                location,
                lambda: _listed.pop(location, None),
                listening=lambda: _listening.add(key),
                until=stale,
            )
        except ListenNotSupportedError:
            logger.info("MCP server %s cannot say when its tools change: read every %g s",
                        location, settings.CONTINUITY_MCP_TOOLS_TTL)  # fmt: skip
            return
        except Exception as error:  # the server went away: its list is read again when back
            logger.info("Listening to MCP server %s for tool changes: %r", location, error)
            _listed.pop(location, None)
        finally:
            _listening.discard(key)
        deadline = time.monotonic() + LISTEN_AGAIN_SECONDS
        while time.monotonic() < deadline and not stale():
            time.sleep(0.5)


def listening(location: str) -> bool:
    """Whether this process listens to the server for changes of its tools now."""
    return (os.getpid(), location) in _listening


def tools_forget(location: str = "") -> None:
    """Read the server's tools (every server's and the registry, without a location) again at
    their next use: its list changed."""
    if location:
        _listed.pop(location, None)
    else:
        _listed.clear()
        _registered.clear()
        _generation[0] += 1  # the watchers stop: a new registry starts its own


@receiver(post_save, sender=McpServer)
@receiver(post_delete, sender=McpServer)
@receiver(post_save, sender=ToolPolicy)
@receiver(post_delete, sender=ToolPolicy)
@receiver(setting_changed)
def registry_changed(**kwargs) -> None:
    tools_forget()


# A process says a server is down at most this often: its every round would otherwise write.
DOWN_NOTED_EVERY_SECONDS = 10.0
_down_noted: dict[str, float] = {}


def server_down_note(name: str, location: str, error: str) -> None:
    """The server could not be reached: marked down for the whole deployment (the watchdog
    asks it again, and alerts when it stays down). A database that cannot store it loses
    only the alert's timing."""
    if (
        time.monotonic() - _down_noted.get(name, -DOWN_NOTED_EVERY_SECONDS)
        < DOWN_NOTED_EVERY_SECONDS
    ):
        return
    _down_noted[name] = time.monotonic()
    try:
        with transaction.atomic():
            ToolServerStatus.objects.get_or_create(name=name, defaults={"location": location})
        ToolServerStatus.objects.filter(name=name, down_since__isnull=True).update(
            down_since=Now(), location=location, last_error=error[:2000]
        )
    except IntegrityError:
        pass  # another process marked it at the same moment
    except DatabaseError:
        logger.warning("MCP server %s down, and not marked so", name, exc_info=True)


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
            server_down_note(server.name, server.location, str(exc))
            continue
        for spec in specs:
            if (server.allowed and spec.name not in server.allowed) or spec.name in tools:
                continue
            tools[spec.name] = Tool(
                hinted(spec, server.hints.get(spec.name, {})),
                server.name,
                server.location,
                server.policies.get(spec.name, Policy()),
                server.time_limit,
            )
    note = ""
    if down:
        note = (
            f"The tool server(s) {', '.join(down)} cannot be reached now: their tools are not "
            "available in this reply. Say so if the person asked for something they do."
        )
    return Toolbox(tools, note, tuple(down))
