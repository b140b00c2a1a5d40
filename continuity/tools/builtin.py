"""The built-in tools: in-process and offline, so the agent acts without any server.

Each sees only the asking person's data (`Asker`). A built-in tool runs in the transaction that
records its call and stores its result (delivery's `calls_record`): a write to our own
database (remember, forget) happens exactly once, with its row. A tool's own failure is a
`ToolError`, whose text the model reads as the call's result.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

from ..brains import ToolSpec
from ..context.memory import memory_fact_forget, memory_remember
from ..models import MemoryFact, Message
from ..words import clip

BUILTIN = "built-in"


class ToolError(Exception):
    """The tool could not do what it was asked: the model reads why."""


@dataclass(frozen=True)
class Asker:
    """Whose call it is: a built-in tool reads and writes only this person's data."""

    owner_id: int
    conversation_id: int
    message_id: int


@dataclass(frozen=True)
class BuiltinTool:
    spec: ToolSpec
    run: Callable[[Asker, dict], str]
    # Reads and writes nothing of our database: it runs without locking the attempt's run.
    pure: bool = False


SEARCH_HITS = 5


def search_conversations(asker: Asker, arguments: dict) -> str:
    query = str(arguments.get("query", "")).strip()
    if not query:
        raise ToolError("Say what to search for: a word or a phrase.")
    found = (
        Message.objects.filter(
            conversation__owner_id=asker.owner_id,
            role=Message.Role.USER,
            text__icontains=query,
            hidden_with__isnull=True,
            forgotten_at__isnull=True,
        )
        .exclude(pk=asker.message_id)
        .select_related("conversation")
        .order_by("-id")[:SEARCH_HITS]
    )
    lines = [
        f"- In “{message.conversation}”"
        f"{' (this conversation)' if message.conversation_id == asker.conversation_id else ''}: "
        f"you said “{clip(message.text, 160)}”"
        for message in found
    ]
    if not lines:
        return f"Nothing you said in your conversations mentions “{clip(query, 80)}”."
    return "\n".join(lines)


def remember(asker: Asker, arguments: dict) -> str:
    fact = str(arguments.get("fact", "")).strip()
    if not fact:
        raise ToolError("Say what to remember.")
    key = str(arguments.get("key", "") or "note").strip()[:LONGEST_KEY]
    memory_remember(
        owner_id=asker.owner_id, key=key, value=fact, source_message=Message(pk=asker.message_id)
    )
    return f"Remembered ({key}): {fact}"


# Words from a fact that name it: shorter ones ("it") would match facts nobody meant.
SHORTEST_MATCH = 3


def forget(asker: Asker, arguments: dict) -> str:
    """Forget the fact named by its key, or the one fact whose value holds the words given:
    forgetting cannot be undone, so several that match are named, and none is forgotten."""
    about = str(arguments.get("fact", "") or arguments.get("key", "")).strip()
    if len(about) < SHORTEST_MATCH:
        raise ToolError("Say which fact to forget: its name, or words from it.")
    facts = MemoryFact.objects.current().filter(owner_id=asker.owner_id)
    matching = list(facts.filter(key=about)[:1]) or list(facts.filter(value__icontains=about)[:5])
    if len(matching) > 1:
        named = "; ".join(f"{fact.key}: {fact.value}" for fact in matching)
        raise ToolError(f"Several facts match “{clip(about, 80)}” ({named}): say which one.")
    fact = matching[0] if matching else None
    if fact is None:
        return f"Nothing remembered matches “{clip(about, 80)}”: nothing to forget."
    memory_fact_forget(fact=fact, after_commit=True)
    return f"Forgot {fact.key}: {fact.value}"


OPERATORS: dict[type, Callable] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
# Bounds that keep one expression from holding a worker: 10 ** 10 ** 10 is a valid expression.
LARGEST_EXPONENT = 1000
LONGEST_EXPRESSION = 200


def calculate(asker: Asker, arguments: dict) -> str:
    expression = str(arguments.get("expression", "")).strip()
    if not expression or len(expression) > LONGEST_EXPRESSION:
        raise ToolError(f"Give an arithmetic expression of 1 to {LONGEST_EXPRESSION} characters.")
    written = expression.replace("×", "*").replace("÷", "/").replace("^", "**").replace("−", "-")
    try:
        value = evaluated(ast.parse(written, mode="eval").body)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, OverflowError) as exc:
        raise ToolError(f"Cannot calculate “{clip(expression, 80)}”: {exc}.") from None
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return f"{expression} = {value}"


def evaluated(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluated(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        left, right = evaluated(node.left), evaluated(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > LARGEST_EXPONENT:
            raise ValueError(f"an exponent above {LARGEST_EXPONENT}")
        value = OPERATORS[type(node.op)](left, right)
        if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError("the result is not a finite real number")
        return value
    raise ValueError("only numbers, + − × ÷ // % ** and brackets")


# Every text argument has a bound: a server that constrains a call to its schema (llama.cpp's)
# then ends the call there, where an unbounded string ran on until the window was full.
LONGEST_TEXT = 500
LONGEST_KEY = 64


def text_argument(name: str, description: str, longest: int = LONGEST_TEXT) -> dict:
    return {
        "type": "object",
        "properties": {name: text(description, longest)},
        "required": [name],
    }


def text(description: str, longest: int = LONGEST_TEXT) -> dict:
    return {"type": "string", "description": description, "maxLength": longest}


BUILTIN_TOOLS = {
    tool.spec.name: tool
    for tool in (
        BuiltinTool(
            ToolSpec(
                name="search_conversations",
                description="Search what the person said in their own conversations.",
                input_schema=text_argument("query", "Words to look for."),
                read_only=True,
                destructive=False,
                open_world=False,
            ),
            search_conversations,
        ),
        BuiltinTool(
            ToolSpec(
                name="remember",
                description="Remember a fact about the person in all their conversations.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "fact": text("The fact, in a sentence."),
                        "key": text("Its name (default: note).", LONGEST_KEY),
                    },
                    "required": ["fact"],
                },
                idempotent=True,
                destructive=False,
                open_world=False,
            ),
            remember,
        ),
        BuiltinTool(
            ToolSpec(
                name="forget",
                description="Forget a remembered fact about the person.",
                input_schema=text_argument("fact", "The fact's name, or words from it."),
                idempotent=True,
                open_world=False,
            ),
            forget,
        ),
        BuiltinTool(
            ToolSpec(
                name="calculate",
                description="Work out an arithmetic expression exactly.",
                input_schema=text_argument(
                    "expression", "For example 17 * 23 or (2 + 3) ** 4.", LONGEST_EXPRESSION
                ),
                read_only=True,
                destructive=False,
                open_world=False,
            ),
            calculate,
            pure=True,
        ),
    )
}
