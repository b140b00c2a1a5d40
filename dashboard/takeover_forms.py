"""What the conversation page needs to take a conversation over, answer in it, and hand it
back (continuity/actions/takeover.py)."""

from __future__ import annotations

from django.db.models import Count, Max, Sum

from continuity.actions import waiting_for_support
from continuity.models import Conversation
from continuity.selectors import exchanges_page

from .forms import HandBackForm, StaffReplyForm, TakeOverForm


def thread_stamp(conversation: Conversation) -> str:
    """What the thread shows, in a few characters: the same stamp, the same thread."""
    found = conversation.messages.aggregate(
        n=Count("pk"), last=Max("pk"), versions=Sum("version"), changed=Max("updated_at")
    )
    changed = found["changed"].timestamp() if found["changed"] else 0
    return f"{found['n']}-{found['last'] or 0}-{found['versions'] or 0}-{changed:.6f}"


def takeover_context(conversation: Conversation, **forms) -> dict:
    taken_over = conversation.state == Conversation.State.TAKEN_OVER
    waiting = waiting_for_support(conversation) if taken_over else None
    return {
        "take_over_form": forms.get("take_over_form") or TakeOverForm(prefix="take-over"),
        "reply_form": forms.get("reply_form")
        or StaffReplyForm(initial={"answering": waiting.pk if waiting else None}),
        "hand_back_form": forms.get("hand_back_form") or HandBackForm(),
        "thread": exchanges_page(conversation=conversation).exchanges if taken_over else [],
        "waiting": waiting,
        "thread_stamp": thread_stamp(conversation) if taken_over else "",
    }
