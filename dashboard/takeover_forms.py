"""What the conversation page needs to take a conversation over, answer in it, and hand it
back (continuity/delivery/takeover.py)."""

from __future__ import annotations

from continuity.delivery.takeover import waiting_for_support
from continuity.models import Conversation
from continuity.selectors import exchanges_page

from .forms import HandBackForm, StaffReplyForm, TakeOverForm


def takeover_context(conversation: Conversation, **forms) -> dict:
    taken_over = conversation.state == Conversation.State.TAKEN_OVER
    waiting = waiting_for_support(conversation) if taken_over else None
    return {
        "take_over_form": forms.get("take_over_form") or TakeOverForm(prefix="take-over"),
        "reply_form": forms.get("reply_form")
        or StaffReplyForm(initial={"answering": waiting.pk if waiting else None}),
        "hand_back_form": forms.get("hand_back_form") or HandBackForm(),
        "thread": exchanges_page(conversation).exchanges if taken_over else [],
        "waiting": waiting,
    }
