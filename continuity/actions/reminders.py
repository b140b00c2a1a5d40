"""A person cancels a reminder the agent set for them, before it is due."""

from __future__ import annotations

from django.db.models.functions import Now

from ..models import Reminder


def reminder_cancel(*, reminder: Reminder) -> bool:
    """False when it is no longer scheduled (delivered meanwhile, or cancelled in another tab)."""
    return bool(
        Reminder.objects.filter(pk=reminder.pk, state=Reminder.State.SCHEDULED).update(
            state=Reminder.State.CANCELLED, cancelled_at=Now()
        )
    )
