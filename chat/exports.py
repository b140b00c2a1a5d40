"""A conversation as its owner can take it away: Markdown to read, JSON to process."""

from __future__ import annotations

import functools
from datetime import datetime
from zoneinfo import ZoneInfo, available_timezones

from continuity.actions import support_name
from continuity.models import Conversation, Message
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
    for message in export_messages(conversation):
        who = author_of(message)
        lines += [f"## {who} · {export_time(message.created_at, zone)}", ""]
        if message.role == Message.Role.USER and message.state == Message.State.DEAD:
            lines += ["*(This message could not be processed.)*", ""]
        if note := reply_note(reply=message):
            lines += [markdown_closed(message.text), "", f"*({note.text})*", ""]
            continue
        lines += [message.text, ""]
    return "\n".join(lines)


def author_of(message: Message) -> str:
    if message.role == Message.Role.USER:
        return "You"
    if message.role == Message.Role.STAFF:
        return f"{support_name(message.author) if message.author else 'Someone'} (support)"
    return "Assistant"


def export_json(conversation: Conversation, zone: ZoneInfo | None = None) -> dict:
    zone = zone or ZoneInfo("UTC")
    return {
        "id": conversation.pk,
        "title": str(conversation),
        "time_zone": zone.key,
        "created_at": conversation.created_at.astimezone(zone).isoformat(),
        "archived": conversation.archived_at is not None,
        "messages": [
            {
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
            for message in export_messages(conversation)
        ],
    }
