"""The MCP test server (devtools.mcp_server) as CONTINUITY_MCP_SERVERS names it."""

from __future__ import annotations

import json


def ledger_server(url: str, *, asks_first: bool = False) -> dict:
    """Its ledger tool is unannotated, so destructive by MCP's defaults, and asks for approval
    first: only when `asks_first`, for tests of something else make it run at once."""
    policies = {} if asks_first else {"ledger_append": {"approval": "never"}}
    return {"name": "ledger", "url": url, "policies": policies}


def ledger_servers_env(url: str, *, asks_first: bool = False) -> str:
    """The same, as a worker's CONTINUITY_MCP_SERVERS environment variable."""
    return json.dumps([ledger_server(url, asks_first=asks_first)])
