"""A conversation as its owner can take it away: Markdown to read, JSON to process."""

from __future__ import annotations

import functools
import re
from datetime import datetime
from zoneinfo import ZoneInfo, available_timezones

from continuity.actions import support_name
from continuity.models import Conversation, Message, ToolCall
from continuity.selectors import reply_note

from .rendering import markdown_closed


def export_messages(conversation: Conversation):
    """The shown branch, as the page shows it; other versions stay in the app."""
    return conversation.messages.shown().select_related("author").order_by("id")


@functools.cache
def zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def export_zone(name: str | None) -> ZoneInfo:
    """The reader's time zone, as their browser names it (the page adds it to the export's
    link); UTC when it is missing or not a zone's name."""
    return ZoneInfo(name if name in zone_names() else "UTC")


def export_time(at: datetime, zone: ZoneInfo) -> str:
    """A time in the reader's zone with its UTC offset: 2026-11-28 12:06:12 +01:00."""
    local = at.astimezone(zone)
    offset = f"{local:%z}"  # +0100
    return f"{local:%Y-%m-%d %H:%M:%S} {offset[:3]}:{offset[3:]}"


def export_markdown(conversation: Conversation, zone: ZoneInfo | None = None) -> str:
    zone = zone or ZoneInfo("UTC")
    lines = [
        f"# {conversation}",
        "",
        f"Exported from Continuity. Started {export_time(conversation.created_at, zone)}. "
        f"Times are in {zone.key}, with their offset from UTC.",
        "",
    ]
    messages = list(export_messages(conversation))
    calls = calls_by_message(messages)
    replied = {m.reply_to_id for m in messages if m.reply_to_id}
    for message in messages:
        who = author_of(message)
        lines += [f"## {who} · {export_time(message.created_at, zone)}", ""]
        if message.role == Message.Role.USER and message.state == Message.State.DEAD:
            lines += ["*(This message could not be processed.)*", ""]
        # A reply's tool calls come first in it; those of a message not answered yet, after it.
        answered = message.reply_to_id or (None if message.pk in replied else message.pk)
        for call in calls.get(answered, ()):
            lines += call_markdown(call)
        if note := reply_note(reply=message):
            lines += [markdown_closed(message.text), "", f"*({note.text})*", ""]
            continue
        lines += [message.text, ""]
    return "\n".join(lines)


def calls_by_message(messages: list[Message]) -> dict[int, list[ToolCall]]:
    found: dict[int, list[ToolCall]] = {}
    calls = ToolCall.objects.filter(message__in=[m for m in messages if m.role == "user"])
    for call in calls.order_by("round", "position"):
        found.setdefault(call.message_id, []).append(call)
    return found


def call_markdown(call: ToolCall) -> list[str]:
    """A tool call as the page's block says it: what it did, its arguments, its result as
    plain text (fenced, so no result can be read as Markdown)."""
    said = [f"**{call.label}** (`{call.tool}`, {call.get_state_display().lower()})", ""]
    said += [f"- {key}: {value}" for key, value in call.arguments.items()]
    if call.arguments:
        said.append("")
    if text := call.problem or call.result:
        said += [fenced(text), ""]
    return said


def fenced(text: str) -> str:
    """`text` in a code fence longer than any run of backticks in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def call_json(call: ToolCall) -> dict:
    return {
        "tool": call.tool,
        "source": call.source,
        "round": call.round,
        "state": call.state,
        "arguments": call.arguments,
        "result": call.problem or call.result,
        "result_cut": call.result_cut,
        "decision": call.decision,
    }


def author_of(message: Message) -> str:
    if message.role == Message.Role.USER:
        return "You"
    if message.role == Message.Role.STAFF:
        return f"{support_name(message.author) if message.author else 'Someone'} (support)"
    return "Assistant"


def export_json(conversation: Conversation, zone: ZoneInfo | None = None) -> dict:
    """Each user message carries the tool calls of the reply to it (`tool_calls`)."""
    zone = zone or ZoneInfo("UTC")
    messages = list(export_messages(conversation))
    calls = calls_by_message(messages)
    return {
        "id": conversation.pk,
        "title": str(conversation),
        "time_zone": zone.key,
        "created_at": conversation.created_at.astimezone(zone).isoformat(),
        "archived": conversation.archived_at is not None,
        "messages": [
            {
                **(
                    {"tool_calls": [call_json(call) for call in calls.get(message.pk, ())]}
                    if message.pk in calls
                    else {}
                ),
                "id": message.pk,
                "role": message.role,
                "state": message.state,
                "text": message.text,
                "created_at": message.created_at.astimezone(zone).isoformat(),
                "reply_to": message.reply_to_id,
                "stopped": message.stopped,
                "stopped_by_staff": message.stopped_by_staff,
                "cut_off": message.cut_off,
                **({"author": author_of(message)} if message.role == Message.Role.STAFF else {}),
            }
            for message in messages
        ],
    }
