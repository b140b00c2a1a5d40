"""The agent's tools: what MCP servers offer and calling them (`servers`). The call records,
their policy and the built-in tools join them here (docs/architecture.md)."""

from __future__ import annotations

from .servers import IDEMPOTENCY_KEY, ToolResult, ToolSpec, server_call, server_tools

__all__ = ["IDEMPOTENCY_KEY", "ToolResult", "ToolSpec", "server_call", "server_tools"]
