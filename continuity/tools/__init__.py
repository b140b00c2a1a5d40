"""The agent's tools: which it may call now (`registry`), the built-in ones (`builtin`), MCP
servers' (`servers`), and running one call (`calls`). The call records and their policy are
the delivery's (continuity/delivery/rounds.py); docs/tools.md says what a tool author must
know."""

from __future__ import annotations

from .builtin import BUILTIN, BUILTIN_TOOLS, Asker, ToolError, when_said
from .calls import arguments_problem, call_run, result_cut
from .registry import Tool, Toolbox, server_down_note, toolbox, tools_forget, tools_ready
from .servers import IDEMPOTENCY_KEY, ToolResult, server_call, server_tools, spec_of

__all__ = [
    "BUILTIN",
    "BUILTIN_TOOLS",
    "IDEMPOTENCY_KEY",
    "Asker",
    "Tool",
    "ToolError",
    "ToolResult",
    "Toolbox",
    "arguments_problem",
    "call_run",
    "result_cut",
    "server_call",
    "server_down_note",
    "server_tools",
    "spec_of",
    "toolbox",
    "tools_forget",
    "tools_ready",
    "when_said",
]
