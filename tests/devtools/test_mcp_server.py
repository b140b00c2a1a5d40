"""The test MCP server (devtools/mcp_server.py), a real process spoken to over streamable HTTP by
the `mcp` SDK's own client: each kind of tool says what it is, the idempotency key each call
carries in `_meta` reaches the tool, and the ledger counts every run of a call across restarts.
The tool tests and the chaos run rely on these."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest
from mcp.client import Client

from devtools.mcp_server import IDEMPOTENCY_KEY, ledger_lines
from tests.helpers.processes import McpServerProcess

pytestmark = pytest.mark.processes


@pytest.fixture
def mcp_server(processes):
    return processes.add(McpServerProcess())


def calls(url: str, *requests: tuple[str, dict, str]) -> list:
    """Each (tool, arguments, idempotency key) called in turn on one session."""

    async def run() -> list:
        async with Client(url) as client:
            return [
                await client.call_tool(tool, arguments, meta={IDEMPOTENCY_KEY: key})
                for tool, arguments, key in requests
            ]

    return anyio.run(run)


def tools_of(url: str) -> dict:
    async def run() -> dict:
        async with Client(url) as client:
            return {tool.name: tool.annotations for tool in (await client.list_tools()).tools}

    return anyio.run(run)


def test_each_tool_says_what_kind_it_is(mcp_server):
    tools = tools_of(mcp_server.url)
    assert tools["lookup"].read_only_hint is True
    assert (tools["set_value"].idempotent_hint, tools["set_value"].read_only_hint) == (True, False)
    # Unannotated: MCP's defaults make it the riskiest kind (not read-only, not idempotent).
    assert tools["ledger_append"] is None
    assert {"fail", "wait"} <= set(tools)


def test_the_key_reaches_the_tool_and_the_ledger_counts_every_run(mcp_server):
    found = calls(
        mcp_server.url,
        ("ledger_append", {"entry": "pay rent"}, "call-1"),
        ("ledger_append", {"entry": "pay rent"}, "call-1"),  # the same call run again
        ("lookup", {"word": "tea"}, "call-2"),
        ("set_value", {"name": "colour", "value": "green"}, "call-3"),
    )
    assert [result.is_error for result in found] == [False] * 4
    assert found[0].content[0].text == "Appended 'pay rent' (key call-1)."
    assert found[2].content[0].text == "a drink made by steeping leaves in hot water"
    runs = Counter((line["tool"], line["key"]) for line in ledger_lines(mcp_server.ledger))
    assert runs == {
        ("ledger_append", "call-1"): 2,
        ("lookup", "call-2"): 1,
        ("set_value", "call-3"): 1,
    }


def test_a_failing_tool_answers_with_an_error_result_not_a_broken_session(mcp_server):
    failed, after = calls(
        mcp_server.url,
        ("fail", {"reason": "the printer is on fire"}, "call-1"),
        ("wait", {"seconds": 0.1}, "call-2"),
    )
    assert failed.is_error and failed.content[0].text.endswith(": the printer is on fire")
    assert not after.is_error and after.content[0].text == "Waited 0.1 s."


def test_the_ledger_outlives_a_killed_server(processes, tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    first = processes.add(McpServerProcess(ledger=ledger))
    calls(first.url, ("ledger_append", {"entry": "one"}, "call-1"))
    first.kill_all()
    again = processes.add(McpServerProcess(ledger=ledger, port=first.port))
    calls(again.url, ("ledger_append", {"entry": "one"}, "call-1"))
    assert [line["key"] for line in ledger_lines(ledger)] == ["call-1", "call-1"]
