"""A conversation as its owner can take it away: Markdown to read, JSON to process."""

from __future__ import annotations

from continuity.models import Conversation, Message

from .rendering import markdown_closed


def export_messages(conversation: Conversation):
    """The shown branch, as the page shows it; other versions stay in the app."""
    return conversation.messages.filter(hidden_with__isnull=True).order_by("id")


def export_markdown(conversation: Conversation) -> str:
    lines = [
        f"# {conversation}",
        "",
        f"Exported from Continuity. Started {conversation.created_at:%Y-%m-%d %H:%M} UTC.",
        "",
    ]
    for message in export_messages(conversation):
        who = "You" if message.role == Message.Role.USER else "Assistant"
        lines += [f"## {who} · {message.created_at:%Y-%m-%d %H:%M:%S} UTC", ""]
        if message.role == Message.Role.USER and message.state == Message.State.DEAD:
            lines += ["*(This message could not be processed.)*", ""]
        if message.stopped or message.cut_off:
            lines += [markdown_closed(message.text), "", f"*({ending_of(message)})*", ""]
            continue
        lines += [message.text, ""]
    return "\n".join(lines)


def ending_of(message: Message) -> str:
    if message.stopped:
        return "Stopped: this reply was cut short at your request."
    return "Cut off: the model reached its length limit."


def export_json(conversation: Conversation) -> dict:
    return {
        "id": conversation.pk,
        "title": str(conversation),
        "created_at": conversation.created_at.isoformat(),
        "archived": conversation.archived_at is not None,
        "messages": [
            {
                "id": message.pk,
                "role": message.role,
                "state": message.state,
                "text": message.text,
                "created_at": message.created_at.isoformat(),
                "reply_to": message.reply_to_id,
                "stopped": message.stopped,
                "cut_off": message.cut_off,
            }
            for message in export_messages(conversation)
        ],
    }
