"""A reminder the agent set for its owner: a row with its due time, the database its only
source of truth. Whatever runs the sweep when it is due (the watchdog, a worker's start)
delivers it, once: late, and saying so, if nothing ran at that moment."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from .conversations import Conversation, Message


class Reminder(models.Model):
    class State(models.TextChoices):
        SCHEDULED = "scheduled", "Scheduled"
        DELIVERED = "delivered", "Delivered"
        CANCELLED = "cancelled", "Cancelled"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reminders"
    )
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="reminders"
    )
    text = models.CharField(max_length=500)
    due_at = models.DateTimeField()
    time_zone = models.CharField(
        max_length=64, help_text="The owner's time zone when it was set: its time is said in it."
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.SCHEDULED)
    message = models.OneToOneField(
        Message,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reminder",
        help_text="The assistant's message it became.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["due_at", "pk"]
        indexes = [
            models.Index(
                fields=["due_at"], condition=models.Q(state="scheduled"), name="reminder_due"
            )
        ]

    def __str__(self) -> str:
        return f"Reminder {self.pk} ({self.state}): {self.text[:40]}"
