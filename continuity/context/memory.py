"""What the agent remembers about a person, as the "What I remember" page reads and edits it.

Every read and write of facts for that page goes through these functions, so how facts are
stored (today: one row per owner and key, updated in place) can change behind them.
"""

from __future__ import annotations

from django.db.models import QuerySet

from ..models import MemoryFact


def memory_facts_of(owner) -> QuerySet[MemoryFact]:
    """The owner's facts, with the message each was learned from (None once it is deleted)."""
    return MemoryFact.objects.filter(owner=owner).select_related("source_message__conversation")


def memory_fact_revise(*, fact: MemoryFact, value: str) -> MemoryFact:
    fact.value = value
    fact.save(update_fields=["value", "updated_at"])
    return fact


def memory_fact_delete(*, fact: MemoryFact) -> None:
    fact.delete()
