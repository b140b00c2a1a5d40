"""A real MCP server for the tests and the chaos run, made with the `mcp` SDK's own server side
and spoken to over streamable HTTP: `python -m devtools.mcp_server --port P --ledger PATH`.

Its tools cover each kind the engine must treat differently (MCP's annotations say which):
`lookup` is read-only, `set_value` idempotent, `ledger_append` neither (it writes a line to the
ledger, the effect that must not happen twice), `fail` answers with an error (`isError`), and
`wait` takes its time. Every call, of every tool, is written to the ledger first, with the
idempotency key its request carried in `_meta` (`io.continuity/idempotency-key`): a test counts
a tool's executions per key there, across the server's restarts.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

# Where a call's idempotency key travels: the request's `_meta`, under this name.
IDEMPOTENCY_KEY = "io.continuity/idempotency-key"

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
IDEMPOTENT = ToolAnnotations(
    readOnlyHint=False, idempotentHint=True, destructiveHint=False, openWorldHint=False
)
# MCP's defaults for what is left unsaid: not read-only, not idempotent, destructive, open world.
UNANNOTATED = None

WORDS = {"tea": "a drink made by steeping leaves in hot water", "lisbon": "the capital of Portugal"}


def server(ledger: Path) -> MCPServer:
    tools = MCPServer("continuity-test-tools")
    values: dict[str, str] = {}

    def record(tool: str, ctx: Context, **arguments: object) -> str:
        """Write the call to the ledger, flushed to disk before the tool's effect: a call
        killed mid-way is still counted."""
        key = key_of(ctx)
        line = json.dumps({"tool": tool, "key": key, "arguments": arguments, "at": time.time()})
        with ledger.open("a") as file:
            file.write(line + "\n")
            file.flush()
            os.fsync(file.fileno())
        return key

    @tools.tool(annotations=READ_ONLY)
    def lookup(word: str, ctx: Context) -> str:
        """What a word means, from a small fixed dictionary."""
        record("lookup", ctx, word=word)
        return WORDS.get(word.strip().lower(), f"No entry for {word!r}.")

    @tools.tool(annotations=IDEMPOTENT)
    def set_value(name: str, value: str, ctx: Context) -> str:
        """Set a named value; setting it again to the same value changes nothing."""
        record("set_value", ctx, name=name, value=value)
        values[name] = value
        return f"{name} = {value}"

    @tools.tool(annotations=UNANNOTATED)
    async def ledger_append(entry: str, ctx: Context, first_wait: float = 0.0) -> str:
        """Append an entry to the ledger: each run appends once more. The first run with a
        key then takes `first_wait` seconds (at most 60) to answer: a test kills its caller
        while it runs."""
        seen = any(line["key"] == key_of(ctx) for line in ledger_lines(ledger))
        key = record("ledger_append", ctx, entry=entry)
        if not seen and key:
            await anyio.sleep(min(max(first_wait, 0.0), 60.0))
        return f"Appended {entry!r} (key {key or 'none'})."

    @tools.tool(annotations=READ_ONLY)
    def fail(reason: str, ctx: Context) -> str:
        """Always fails, with the reason given: the result is an error (`isError`), as a tool
        reports a failure it foresaw."""
        record("fail", ctx, reason=reason)
        raise ToolError(reason)

    @tools.tool(annotations=IDEMPOTENT)
    async def teach(word: str, meaning: str, ctx: Context) -> str:
        """Add a tool, define_<word>, and tell the clients listening that the tools changed."""
        record("teach", ctx, word=word, meaning=meaning)
        tools.add_tool(lambda: meaning, name=f"define_{word}", description=f"What {word} means.")
        await ctx.notify_tools_changed()
        return f"Taught {word}."

    @tools.tool(annotations=READ_ONLY)
    async def wait(seconds: float, ctx: Context) -> str:
        """Wait this many seconds (at most 60), then say so, reporting progress each second."""
        record("wait", ctx, seconds=seconds)
        seconds = min(max(seconds, 0.0), 60.0)
        waited = 0.0
        while waited < seconds:
            step = min(1.0, seconds - waited)
            await anyio.sleep(step)
            waited += step
            await ctx.report_progress(waited, seconds, f"Waited {waited:g} of {seconds:g} s")
        return f"Waited {seconds:g} s."

    return tools


def key_of(ctx: Context) -> str:
    """The call's idempotency key, from the request's `_meta`."""
    meta = ctx.request_context.meta or {}
    return meta.get(IDEMPOTENCY_KEY, "")


def ledger_lines(ledger: Path) -> list[dict]:
    """Every call the server recorded, oldest first."""
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, help="Serve streamable HTTP on this port.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--stdio", action="store_true", help="Serve one session on stdio.")
    parser.add_argument("--ledger", type=Path, required=True)
    options = parser.parse_args()
    if options.stdio:
        server(options.ledger).run("stdio")
    elif options.port:
        server(options.ledger).run("streamable-http", host=options.host, port=options.port)
    else:
        parser.error("give --port or --stdio")


if __name__ == "__main__":
    main()
