"""Open pages lose their live channel as soon as the session behind them ends."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver

from continuity.live.events import publish_session_ended

User = get_user_model()
SESSION_FIELDS = ("password", "is_active")


@receiver(user_logged_out)
def close_sockets_of_the_session(sender, request, user, **kwargs) -> None:
    session_key = request.session.session_key
    if session_key:
        publish_session_ended(session_key=session_key)


@receiver(pre_save, sender=User)
def note_credential_change(sender, instance, update_fields=None, **kwargs) -> None:
    """A new password or a deactivation ends every session of the user (Django invalidates them
    through the session hash; this closes their sockets too)."""
    instance._sessions_end = False
    if instance.pk is None or (update_fields and not set(SESSION_FIELDS) & set(update_fields)):
        return
    before = User.objects.filter(pk=instance.pk).values(*SESSION_FIELDS).first()
    instance._sessions_end = before is not None and (
        before["password"] != instance.password or (before["is_active"] and not instance.is_active)
    )


@receiver(post_save, sender=User)
def close_sockets_of_the_user(sender, instance, **kwargs) -> None:
    if getattr(instance, "_sessions_end", False):
        user_id = instance.pk
        transaction.on_commit(lambda: publish_session_ended(user_id=user_id))
