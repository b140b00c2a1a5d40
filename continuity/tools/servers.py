"""Tools on MCP servers, through the official `mcp` SDK's client: over streamable HTTP (a
server's location is its URL) or stdio (its location is a command line, run for the session).
What a server offers (`server_tools`), and one call (`server_call`).

A call carries its idempotency key in the request's `_meta` (`IDEMPOTENCY_KEY`), the same on
every run of the same call, so a server can tell a second run from a new call. What a failure
means for the call's effect is said by which exception it raises:
- `ToolServerDown`: the call was never sent (the server could not be reached, or its session
  not opened): nothing happened, and it may be sent later as if for the first time;
- `ToolCallLost`: the call was sent and no answer came (the connection broke, or the time ran
  out): it may or may not have acted;
- a tool's own failure is no exception: its result says `is_error`.
"""

from __future__ import annotations

import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio
import anyio.to_thread
import httpx2

from ..brains import ToolSpec
from ..errors import ToolCallLost, ToolServerDown

IDEMPOTENCY_KEY = "io.continuity/idempotency-key"

T = TypeVar("T")

# The SDK is imported where it is used, not here: its import takes over a second of CPU (its
# protocol types are pydantic models), paid by every web and worker process at start-up even
# with no MCP server registered. A worker with servers imports it before it forks its pool
# (`sdk_import`), so its pool processes have it ready.
if TYPE_CHECKING:
    from mcp import StdioServerParameters
    from mcp.client import Client
    from mcp_types import Tool


def sdk_import() -> None:
    """Import the parts of the SDK that a session and a call use."""
    import mcp.client  # noqa: F401
    import mcp.client.subscriptions  # noqa: F401
    import mcp_types  # noqa: F401


def spec_of(tool: Tool) -> ToolSpec:
    """What the agent knows of a server's tool; a hint it leaves unsaid takes MCP's default."""

    def said(hint: str, default: bool) -> bool:
        value = getattr(tool.annotations, hint, None)
        return default if value is None else value

    return ToolSpec(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema or {}),
        read_only=said("read_only_hint", False),
        idempotent=said("idempotent_hint", False),
        destructive=said("destructive_hint", True),
        open_world=said("open_world_hint", True),
    )


@dataclass(frozen=True)
class ToolResult:
    """What a call returned: its text, and whether the tool reported a failure."""

    text: str
    is_error: bool


def server_tools(location: str, *, timeout: float) -> list[ToolSpec]:
    """The tools the server at `location` offers. ToolServerDown when it cannot say."""

    async def listed(client: Client) -> list[ToolSpec]:
        return [spec_of(tool) for tool in (await client.list_tools()).tools]

    try:
        return anyio.run(in_session, location, timeout, listed)
    except ToolCallLost as lost:  # listing acts on nothing: a lost answer is a down server
        raise ToolServerDown(str(lost)) from lost


# What a server says of a call's progress: (progress, total or None, message or "").
Progress = Callable[[float, float | None, str], None]


def server_call(
    location: str,
    name: str,
    arguments: dict,
    *,
    key: str,
    timeout: float,
    progress: Progress | None = None,
) -> ToolResult:
    """Call the tool `name` on the server at `location` with `arguments` and the call's
    idempotency `key`, waiting at most `timeout` seconds for its answer. `progress` hears each
    progress notification the server sends meanwhile, on a thread of anyio's (the database may
    be used there, not in the event loop)."""

    async def progressed(done: float, total: float | None, message: str | None) -> None:
        await anyio.to_thread.run_sync(progress, done, total, message or "")

    async def called(client: Client) -> ToolResult:
        from mcp_types import TextContent

        result = await client.call_tool(
            name,
            arguments,
            read_timeout_seconds=timeout,
            progress_callback=progressed if progress is not None else None,
            meta={IDEMPOTENCY_KEY: key},
        )
        text = "\n".join(part.text for part in result.content if isinstance(part, TextContent))
        return ToolResult(text=text, is_error=bool(result.is_error))

    return anyio.run(in_session, location, timeout, called)


def tools_changes(
    location: str,
    changed: Callable[[], None],
    *,
    listening: Callable[[], None],
    until: Callable[[], bool],
) -> None:
    """Listen to the server at `location` for changes of its tool list (MCP's
    `subscriptions/listen`), calling `listening` once the stream is open and `changed` at each
    change, until `until()` says stop (asked every second). Returns when the server ends the
    stream; raises what the SDK raises when it cannot listen (ListenNotSupportedError: a server
    of an earlier protocol)."""

    async def stop_when_asked(scope: anyio.CancelScope) -> None:
        while not until():
            await anyio.sleep(1.0)
        scope.cancel()

    async def listen() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(stop_when_asked, tasks.cancel_scope)
            from mcp.client import Client

            async with (
                Client(client_target(location)) as client,
                client.listen(tools_list_changed=True) as subscription,
            ):
                listening()
                async for _event in subscription:
                    changed()
            tasks.cancel_scope.cancel()

    anyio.run(listen)


# Opening a session (connecting, the MCP handshake) gets this long at most.
CONNECT_SECONDS = 5.0


def client_target(location: str) -> str | StdioServerParameters:
    """What the SDK's client connects to: a URL as it is, a command line as a subprocess."""
    from mcp import StdioServerParameters

    if location.startswith(("http://", "https://")):
        return location
    command, *arguments = shlex.split(location)
    return StdioServerParameters(command=command, args=arguments)


async def in_session(location: str, timeout: float, act: Callable[[Client], Awaitable[T]]) -> T:
    """`act` on a session with the server, within CONNECT_SECONDS and `timeout`:
    ToolServerDown if the session could not be opened or the request could not be sent,
    ToolCallLost if it was sent and no answer came."""
    from mcp.client import Client

    sent = False
    try:
        # One deadline for both: the SDK's client keeps task groups open for the session, and
        # a cancel scope around its opening alone would be left before theirs.
        with anyio.fail_after(CONNECT_SECONDS + timeout):
            async with Client(client_target(location), read_timeout_seconds=timeout) as client:
                sent = True
                return await act(client)
    except Exception as error:  # the SDK's task groups wrap what its transport raised
        causes = leaves(error)
        never_sent = not sent or all(isinstance(cause, httpx2.ConnectError) for cause in causes)
        said = "; ".join(f"{type(cause).__name__}: {cause}" for cause in causes)
        if never_sent:
            raise ToolServerDown(f"MCP server {location} could not be reached ({said}).") from error
        timed_out = any(
            isinstance(cause, TimeoutError) or "timed out" in str(cause).lower() for cause in causes
        )
        raise ToolCallLost(
            f"MCP server {location} gave no answer ({said}).", timed_out=timed_out
        ) from error


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, however deeply nested; or the one given."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]
