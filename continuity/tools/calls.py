"""Running one tool call: a built-in tool in this process, or an MCP server's tool with the
call's idempotency key. What a call returns is the model's to read: a tool's own failure is a
result (`is_error`), never an exception; only a server that could not be reached
(ToolServerDown) or that gave no answer (ToolCallLost) raises."""

from __future__ import annotations

import functools
import json
import logging

import jsonschema
from django.conf import settings
from django.db import DatabaseError

from ..brains import ToolUse
from .builtin import BUILTIN, BUILTIN_TOOLS, Asker, ToolError
from .registry import Tool
from .servers import Progress, ToolResult, server_call

logger = logging.getLogger(__name__)


def arguments_problem(use: ToolUse, tool: Tool | None) -> str:
    """Why the call cannot be made as asked (empty when it can): its tool is not offered,
    its arguments are too long or not what the tool's schema asks."""
    if use.problem:
        return use.problem
    if tool is None:
        return f"There is no tool named {use.name!r} in this reply."
    size = len(json.dumps(use.arguments).encode())
    if size > settings.CONTINUITY_TOOL_ARGUMENT_BYTES:
        return (
            f"The arguments are {size:,} bytes; a call may have at most "
            f"{settings.CONTINUITY_TOOL_ARGUMENT_BYTES:,}."
        )
    if (validator := schema_validator(json.dumps(tool.spec.input_schema, sort_keys=True))) is None:
        logger.warning("Tool %s has an invalid input schema; its arguments go unchecked", use.name)
        return ""
    if (
        error := jsonschema.exceptions.best_match(validator.iter_errors(use.arguments))
    ) is not None:
        return f"The arguments do not match the tool's schema: {error.message}."
    return ""


@functools.lru_cache(maxsize=256)
def schema_validator(schema: str) -> jsonschema.protocols.Validator | None:
    """A validator for the schema (its JSON text), checked and made once per process: checking
    a schema took longer than the call it guards. None for a schema that is not one."""
    loaded = json.loads(schema) or {"type": "object"}
    kind = jsonschema.validators.validator_for(loaded)
    try:
        kind.check_schema(loaded)
    except jsonschema.SchemaError:
        return None
    return kind(loaded)


def call_run(
    tool: Tool, arguments: dict, *, key: str, asker: Asker, progress: Progress | None = None
) -> ToolResult:
    """Run the call once. A built-in tool that writes our database does it in the caller's
    transaction. `progress` hears what a server says of its progress meanwhile."""
    if tool.source == BUILTIN:
        try:
            return ToolResult(BUILTIN_TOOLS[tool.spec.name].run(asker, arguments), is_error=False)
        except ToolError as exc:
            return ToolResult(str(exc), is_error=True)
        except DatabaseError:
            raise  # the database's fault, not the tool's: the attempt is given back
        except Exception as exc:  # the tool's own failure: the model reads it, the message goes on
            logger.exception("Built-in tool %s failed", tool.spec.name)
            return ToolResult(f"The tool failed: {type(exc).__name__}: {exc}", is_error=True)
    return server_call(
        tool.location,
        tool.spec.name,
        arguments,
        key=key,
        timeout=tool.time_limit,
        progress=progress,
    )


def result_cut(text: str) -> tuple[str, bool]:
    """The result as the model reads it: at most CONTINUITY_TOOL_RESULT_BYTES of UTF-8, and
    whether it was cut."""
    limit = settings.CONTINUITY_TOOL_RESULT_BYTES
    encoded = text.encode()
    if len(encoded) <= limit:
        return text, False
    kept = encoded[:limit].decode(errors="ignore")
    return (
        f"{kept}\n[Cut: the result was {len(encoded):,} bytes; the first {limit:,} are shown.]",
        True,
    )
