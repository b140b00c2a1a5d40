"""Tools on MCP servers (continuity.tools.servers) against the real test MCP server, a process
of its own: what each tool's annotations make of it, the idempotency key reaching the tool, and
what each way a call can fail says about its effect (never sent, or sent and unanswered)."""

from __future__ import annotations

import threading

import pytest

from continuity.errors import ToolCallLost, ToolServerDown
from continuity.tools import IDEMPOTENCY_KEY, ToolResult, server_call, server_tools
from devtools import mcp_server
from devtools.mcp_server import ledger_lines
from devtools.redis_server import free_port
from tests.helpers.processes import McpServerProcess
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.processes


@pytest.fixture
def tool_server(processes):
    return processes.add(McpServerProcess())


def test_the_key_is_named_as_the_test_server_reads_it():
    assert IDEMPOTENCY_KEY == mcp_server.IDEMPOTENCY_KEY == "io.continuity/idempotency-key"


def test_annotations_say_which_tools_may_run_again_and_silence_is_the_riskiest(tool_server):
    tools = {spec.name: spec for spec in server_tools(tool_server.url, timeout=10)}
    assert tools["lookup"].read_only and tools["lookup"].runs_again_safely
    assert tools["set_value"].idempotent and not tools["set_value"].read_only
    assert tools["set_value"].runs_again_safely and not tools["set_value"].destructive
    unannotated = tools["ledger_append"]
    assert (unannotated.read_only, unannotated.idempotent) == (False, False)
    assert (unannotated.destructive, unannotated.open_world) == (True, True)
    assert not unannotated.runs_again_safely
    assert tools["lookup"].input_schema["properties"]["word"]["type"] == "string"


def test_a_call_carries_its_key_to_the_tool(tool_server):
    result = server_call(
        tool_server.url, "ledger_append", {"entry": "pay rent"}, key="call-7", timeout=10
    )
    assert result == ToolResult(text="Appended 'pay rent' (key call-7).", is_error=False)
    assert [(line["tool"], line["key"]) for line in ledger_lines(tool_server.ledger)] == [
        ("ledger_append", "call-7")
    ]


def test_a_tools_own_failure_is_its_result_not_an_exception(tool_server):
    result = server_call(tool_server.url, "fail", {"reason": "no paper"}, key="k", timeout=10)
    assert result.is_error and result.text.endswith("no paper")


def test_a_server_that_cannot_be_reached_was_never_sent_the_call():
    url = f"http://127.0.0.1:{free_port()}/mcp"  # nothing listens there
    with pytest.raises(ToolServerDown, match="could not be reached"):
        server_call(url, "ledger_append", {"entry": "x"}, key="k", timeout=5)
    with pytest.raises(ToolServerDown):
        server_tools(url, timeout=5)


def test_a_server_that_dies_during_the_call_leaves_it_unanswered(tool_server):
    """The call reached the tool (the ledger has it) and no answer came: lost, not down."""
    raised: list[BaseException] = []

    def call() -> None:
        try:
            server_call(tool_server.url, "wait", {"seconds": 30}, key="k-wait", timeout=60)
        except BaseException as error:  # noqa: BLE001 - what it raised is the test's subject
            raised.append(error)

    calling = threading.Thread(target=call)
    calling.start()
    wait_for(lambda: ledger_lines(tool_server.ledger), timeout=10, what="the call to arrive")
    tool_server.kill_all()
    calling.join(timeout=30)
    assert not calling.is_alive()
    assert [type(error) for error in raised] == [ToolCallLost]
    assert not raised[0].timed_out  # broken, not slow: a safe tool is sent again


def test_a_call_past_its_time_is_unanswered_not_down(tool_server):
    with pytest.raises(ToolCallLost, match="gave no answer") as lost:
        server_call(tool_server.url, "wait", {"seconds": 5}, key="k", timeout=0.5)
    assert lost.value.timed_out
    assert [line["key"] for line in ledger_lines(tool_server.ledger)] == ["k"]


def test_a_server_run_as_a_local_command_speaks_over_stdio(tmp_path):
    """A location that is not a URL is a command line: the SDK runs it for the session and
    speaks MCP over its standard input and output; the key reaches the tool all the same."""
    import shlex
    import sys

    ledger = tmp_path / "ledger.jsonl"
    command = shlex.join(
        [sys.executable, "-m", "devtools.mcp_server", "--stdio", "--ledger", str(ledger)]
    )

    names = {spec.name for spec in server_tools(command, timeout=30)}
    result = server_call(command, "ledger_append", {"entry": "tea"}, key="k-1", timeout=30)

    assert {"lookup", "set_value", "ledger_append"} <= names
    assert result == ToolResult("Appended 'tea' (key k-1).", is_error=False)
    assert [(line["tool"], line["key"]) for line in ledger_lines(ledger)] == [
        ("ledger_append", "k-1")
    ]


def test_a_command_that_cannot_run_is_a_server_down_and_nothing_was_sent(tmp_path):
    with pytest.raises(ToolServerDown, match="could not be reached"):
        server_call(str(tmp_path / "no-such-command"), "lookup", {}, key="k", timeout=5)


def test_a_server_that_says_its_tools_changed_is_asked_for_them_again(tool_server, settings):
    """The registry keeps a server's list for CONTINUITY_MCP_TOOLS_TTL, and listens meanwhile
    (MCP's `subscriptions/listen`): when the server says its tools changed, the list is read
    again at the next round."""
    from continuity.tools import toolbox
    from continuity.tools.registry import listening

    settings.CONTINUITY_MCP_SERVERS = [{"name": "test", "url": tool_server.url}]
    settings.CONTINUITY_MCP_TOOLS_TTL = 3600
    assert "define_tea" not in toolbox().tools
    wait_for(lambda: listening(tool_server.url), timeout=10, what="the registry to listen")

    server_call(
        tool_server.url, "teach", {"word": "tea", "meaning": "a drink"}, key="k", timeout=10
    )

    wait_for(lambda: "define_tea" in toolbox().tools, timeout=10, what="the new tool")


@pytest.mark.django_db(transaction=True)
def test_a_server_down_for_a_minute_raises_one_alert_that_clears_itself(processes, settings):
    from datetime import timedelta

    from continuity.delivery import tool_servers_check
    from continuity.models import Alert, ToolServerStatus
    from continuity.tools import toolbox
    from devtools.redis_server import free_port
    from tests.helpers.processes import McpServerProcess

    port = free_port()
    settings.CONTINUITY_MCP_SERVERS = [{"name": "flaky", "url": f"http://127.0.0.1:{port}/mcp"}]
    assert "flaky" in toolbox().down
    status = ToolServerStatus.objects.get(name="flaky")
    assert status.down_since is not None

    assert tool_servers_check() == 1
    assert not Alert.objects.exists()  # down, but not for a minute yet
    ToolServerStatus.objects.filter(pk=status.pk).update(
        down_since=status.down_since - timedelta(seconds=61), checked_at=None
    )
    tool_servers_check()
    ToolServerStatus.objects.filter(pk=status.pk).update(checked_at=None)
    tool_servers_check()  # asked again, still down: still the one alert

    alert = Alert.objects.get()
    assert alert.kind == "tool_server_down" and "The MCP server flaky" in alert.text
    assert alert.acknowledged_at is None

    processes.add(McpServerProcess(port=port))
    ToolServerStatus.objects.filter(pk=status.pk).update(checked_at=None)
    assert tool_servers_check() == 0

    alert.refresh_from_db()
    assert alert.acknowledged_at is not None  # cleared by itself
    assert ToolServerStatus.objects.get(pk=status.pk).down_since is None
    assert Alert.objects.count() == 1
