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
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..brains import ToolSpec
from ..context.memory import memory_fact_forget, memory_remember
from ..database.clock import database_now
from ..models import Conversation, MemoryFact, Message, Reminder
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


# How far ahead a reminder may be set.
LONGEST_WAIT = timedelta(days=366)
# "09:00", "9 am", "tomorrow 9:30", "today at 17:00", "2026-12-01 09:00", "2026-12-01T09:00".
AT = re.compile(
    r"^\s*(?:(?P<day>today|tomorrow)\s+|(?P<date>\d{4}-\d{2}-\d{2})[t\s]+)?(?:at\s+)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?(?::\d{2})?\s*(?P<half>am|pm)?\s*$",
    re.IGNORECASE,
)


def person_zone(conversation_id: int) -> ZoneInfo:
    """The time zone the person's browser last named in this conversation; UTC if none."""
    name = Conversation.objects.filter(pk=conversation_id).values_list("time_zone", flat=True)
    try:
        return ZoneInfo(name.first() or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def reminder_due(arguments: dict, *, now: datetime, zone: ZoneInfo) -> datetime:
    """When the reminder is due: `in_minutes` from now, or `at` a time of the person's day
    (today's if it is still ahead, else tomorrow's, unless a day or a date is said)."""
    minutes, at = arguments.get("in_minutes"), str(arguments.get("at") or "").strip()
    if minutes is not None and not at:
        if not isinstance(minutes, (int, float)) or not 0 < minutes <= LONGEST_WAIT / timedelta(
            minutes=1
        ):
            raise ToolError("Give in_minutes as a number of minutes from now, at most a year.")
        return now + timedelta(minutes=minutes)
    match = AT.match(at)
    if match is None:
        raise ToolError(
            "Say when: in_minutes, or at as HH:MM, “tomorrow HH:MM” or “YYYY-MM-DD HH:MM” "
            "(the person's own time)."
        )
    hour, minute = int(match["hour"]), int(match["minute"] or 0)
    if match["half"]:
        if not 1 <= hour <= 12:
            raise ToolError(f"“{at}” is not a time of day.")
        hour = hour % 12 + (12 if match["half"].lower() == "pm" else 0)
    local_now = now.astimezone(zone)
    try:
        day = (
            datetime.strptime(match["date"], "%Y-%m-%d").date()
            if match["date"]
            else local_now.date() + timedelta(days=int((match["day"] or "").lower() == "tomorrow"))
        )
        due = datetime(day.year, day.month, day.day, hour, minute, tzinfo=zone)
    except ValueError:
        raise ToolError(f"“{at}” is not a time of day.") from None
    if not (match["day"] or match["date"]) and due <= local_now:
        due += timedelta(days=1)  # a time already past today: tomorrow's
    if due <= local_now:
        raise ToolError(f"{due:%Y-%m-%d %H:%M} has passed already, in {zone.key}.")
    if due - local_now > LONGEST_WAIT:
        raise ToolError("A reminder may be set at most a year ahead.")
    return due


def when_said(moment: datetime, zone: ZoneInfo) -> str:
    """A moment in the person's own time: "Mon 30 Nov, 09:00 (Europe/Lisbon)"."""
    local = moment.astimezone(zone)
    return f"{local:%a} {local.day} {local:%b %Y}, {local:%H:%M} ({zone.key})"


def set_reminder(asker: Asker, arguments: dict) -> str:
    text = str(arguments.get("text", "")).strip()
    if not text:
        raise ToolError("Say what to remind the person of.")
    zone = person_zone(asker.conversation_id)
    due = reminder_due(arguments, now=database_now(), zone=zone)
    Reminder.objects.create(
        owner_id=asker.owner_id,
        conversation_id=asker.conversation_id,
        text=text[:LONGEST_TEXT],
        due_at=due,
        time_zone=zone.key,
    )
    return f"Reminder set for {when_said(due, zone)}: {text}"


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
                name="set_reminder",
                description="Remind the person of something later: a message from you appears "
                "in this conversation at that time. Times are the person's own local time.",
                input_schema={
                    "type": "object",
                    "properties": {
                        "text": text("What to remind them of, e.g. call the dentist."),
                        "in_minutes": {
                            "type": "number",
                            "description": "Minutes from now (for “in 10 minutes”).",
                        },
                        "at": text(
                            "Or when, in their time: HH:MM, “tomorrow HH:MM” or "
                            "“YYYY-MM-DD HH:MM”.",
                            40,
                        ),
                    },
                    "required": ["text"],
                },
                destructive=False,
                open_world=False,
            ),
            set_reminder,
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
