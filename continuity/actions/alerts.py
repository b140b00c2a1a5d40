"""Staff acknowledging an alert. (Raising one, and its mail, is the engine's:
`delivery.alerts`.)"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from ..delivery.audit import staff_action_record
from ..errors import InvalidTransition
from ..models import Alert, StaffAction


@transaction.atomic
def alert_acknowledge(*, alert: Alert, by, reason: str = "") -> None:
    """Mark an alert as seen by someone; the conversation itself is left as it is."""
    if not Alert.objects.filter(pk=alert.pk, acknowledged_at=None).update(
        acknowledged_at=timezone.now(), acknowledged_by=by
    ):
        raise InvalidTransition(f"Alert {alert.pk} was already acknowledged.")
    staff_action_record(
        kind=StaffAction.Kind.ACKNOWLEDGE,
        by=by,
        reason=reason,
        alert=alert,
        conversation_id=alert.conversation_id,
    )
