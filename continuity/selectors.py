"""Read models for the chat pages and the staff dashboard."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, DurationField, ExpressionWrapper, F, Max, QuerySet
from django.db.models.functions import Now

from .context.recoveries import recovery_sentence
from .models import Conversation, Message, Recovery, ReplyChunk, Run


@dataclass(frozen=True)
class Exchange:
    """A user message with its reply, or with the part of the reply streamed so far."""

    message: Message
    reply: Message | None
    streaming_run_id: int | None = None
    streamed_text: str = ""
    last_seq: int = 0
    recoveries: tuple[RecoveryBanner, ...] = ()


@dataclass(frozen=True)
class RecoveryBanner:
    """A restart banner, shown with the exchange whose answer was interrupted and resumed."""

    pk: int
    sentence: str


def conversations_of(owner) -> QuerySet[Conversation]:
    return Conversation.objects.filter(owner=owner)


def exchanges_of(
    conversation: Conversation, *, message_ids: Iterable[int] | None = None
) -> list[Exchange]:
    messages = conversation.messages.filter(role=Message.Role.USER).select_related(
        "reply", "dead_letter__retried_as", "reasked_from"
    )
    if message_ids is not None:
        messages = messages.filter(pk__in=list(message_ids))
    messages = list(messages.order_by("id"))
    streaming = streaming_runs(m.pk for m in messages if m.state == Message.State.PROCESSING)
    banners = recovery_banners([m.pk for m in messages])
    return [
        Exchange(
            message=m,
            reply=getattr(m, "reply", None),
            recoveries=banners.get(m.pk, ()),
            **streaming.get(m.pk, {}),
        )
        for m in messages
    ]


def recovery_banners(message_ids: list[int]) -> dict[int, tuple[RecoveryBanner, ...]]:
    found: dict[int, tuple[RecoveryBanner, ...]] = {}
    for recovery in Recovery.objects.filter(message_id__in=message_ids).order_by("id"):
        banner = RecoveryBanner(pk=recovery.pk, sentence=recovery_sentence(recovery))
        found[recovery.message_id] = (*found.get(recovery.message_id, ()), banner)
    return found


def streaming_runs(message_ids: Iterable[int]) -> dict[int, dict]:
    """For each message being answered: its live run and the chunks that run has stored."""
    runs = Run.objects.filter(message_id__in=list(message_ids), state=Run.State.RUNNING)
    found: dict[int, dict] = {}
    for run in runs:
        chunks = list(ReplyChunk.objects.filter(run=run).order_by("seq").values_list("seq", "text"))
        found[run.message_id] = {
            "streaming_run_id": run.pk,
            "streamed_text": "".join(text for _, text in chunks),
            "last_seq": chunks[-1][0] if chunks else 0,
        }
    return found


def newest_message_id(conversation: Conversation) -> int:
    return conversation.messages.aggregate(newest=Max("pk"))["newest"] or 0


def message_counts_by_state() -> dict[str, int]:
    counts = dict(
        Message.objects.filter(role=Message.Role.USER)
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    return {state: counts.get(state, 0) for state in Message.State.values}


def retry_wait_of(conversation: Conversation) -> int | None:
    """Seconds until an interrupted message is tried again (the backoff, on the database's
    clock), or None when no message waits on one: paused, an attempt running, nothing queued."""
    wait = (
        Conversation.objects.filter(
            pk=conversation.pk,
            state=Conversation.State.ACTIVE,
            retry_at__gt=Now(),
            messages__role=Message.Role.USER,
            messages__state=Message.State.QUEUED,
            messages__attempts__gt=0,
        )
        .exclude(runs__state=Run.State.RUNNING)
        .annotate(wait=ExpressionWrapper(F("retry_at") - Now(), output_field=DurationField()))
        .values_list("wait", flat=True)
        .first()
    )
    return None if wait is None else max(1, math.ceil(wait.total_seconds()))


def conversation_status(conversation: Conversation) -> dict:
    """What the status next to the composer needs: the conversation's state and any backoff."""
    return {"conversation": conversation, "retry_in": retry_wait_of(conversation)}
