"""The agent port: the engine runs a brain's steps, checkpoints them and streams the reply."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class Turn:
    role: str
    text: str


@dataclass(frozen=True)
class Context:
    """What a brain may know when answering one user message."""

    owner_id: int
    conversation_id: int
    message_id: int
    attempt: int
    text: str
    history: list[Turn] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)


class Brain(Protocol):
    def plan(self, context: Context) -> dict:
        """Decide what to do; the result must be JSON-serialisable (it is checkpointed)."""

    def respond(self, context: Context, plan: dict) -> Iterator[str]:
        """Yield the reply piece by piece as it is produced."""

    def remember(self, context: Context, plan: dict, reply: str) -> dict[str, str]:
        """Durable facts about the user learned from this turn."""


def brain_load() -> Brain:
    name = settings.CONTINUITY_BRAIN
    try:
        path = settings.CONTINUITY_BRAINS[name]
    except KeyError:
        known = ", ".join(sorted(settings.CONTINUITY_BRAINS))
        raise ImproperlyConfigured(f"Unknown CONTINUITY_BRAIN {name!r}; known: {known}.") from None
    return import_string(path)()
