"""The audit log of staff actions: every console or admin action leaves one row."""

from __future__ import annotations

from ..models import StaffAction


def staff_action_record(*, kind: str, by, reason: str = "", **targets) -> StaffAction:
    """`targets`: the conversation, dead_letter and/or alert acted on, and `details`."""
    return StaffAction.objects.create(
        kind=kind, actor=by, actor_name=by.get_username(), reason=reason.strip(), **targets
    )
