"""What a person or a staff member does: the services that views, the websocket consumer, the
admin and the commands call, one module per thing acted on (conversations, dead letters,
takeovers, branches, alerts, replies, tool calls). This front door is how outer code reaches them.

Actions call the pipeline (`continuity.delivery`), never the other way round: the engine's own
give-ups (setting a message aside, pausing a conversation) are the pipeline's, and staff's pause
from the console is that same one.
"""

from __future__ import annotations

from ..delivery.pauses import conversation_pause
from .alerts import alert_acknowledge
from .branches import message_edit, reply_regenerate, version_show
from .conversations import (
    conversation_archive,
    conversation_brain_set,
    conversation_delete,
    conversation_rename,
    conversation_resume,
    conversation_retry_now,
    conversation_zone_note,
    conversations_resume,
)
from .dead_letters import (
    dead_letter_discard,
    dead_letter_retry,
    dead_letters_discard,
    dead_letters_retry,
)
from .reminders import reminder_cancel
from .replies import reply_stop
from .takeover import (
    conversation_hand_back,
    conversation_take_over,
    staff_reply,
    support_name,
    waiting_for_support,
)
from .tools import tool_call_answer, tool_call_decide, tool_calls_stop

__all__ = [
    "alert_acknowledge",
    "conversation_archive",
    "conversation_brain_set",
    "conversation_delete",
    "conversation_hand_back",
    "conversation_pause",
    "conversation_rename",
    "conversation_resume",
    "conversation_zone_note",
    "conversation_retry_now",
    "conversation_take_over",
    "conversations_resume",
    "dead_letter_discard",
    "dead_letter_retry",
    "dead_letters_discard",
    "dead_letters_retry",
    "message_edit",
    "reply_regenerate",
    "reminder_cancel",
    "reply_stop",
    "staff_reply",
    "support_name",
    "tool_call_answer",
    "tool_call_decide",
    "tool_calls_stop",
    "version_show",
    "waiting_for_support",
]
