"""The console's Tools page: what the agent's tools did over the last day or week, per tool
(its calls, errors, timeouts, calls in doubt, denials, and run times), the most used first,
and the last failures, each linked to its message's timeline. Counted from the calls' rows,
which retention keeps with their messages."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from continuity.database.clock import database_now
from continuity.models import ToolCall

from .decorators import staff_required

RANGES = {
    "24h": ("the last 24 hours", timedelta(hours=24)),
    "7d": ("the last 7 days", timedelta(days=7)),
}
FAILURES_SHOWN = 20
State = ToolCall.State


@dataclass(frozen=True)
class ToolUse:
    tool: str
    source: str
    calls: int
    done: int
    errors: int
    timeouts: int
    in_doubt: int
    denied: int
    p50: float | None
    p95: float | None


def percentile(ordered: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile of sorted values; None for none."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def tools_used(calls: QuerySet[ToolCall]) -> list[ToolUse]:
    """Per tool, the most called first."""
    rows = (
        calls.values("tool", "source")
        .annotate(
            calls=Count("pk"),
            done=Count("pk", filter=Q(state=State.DONE)),
            errors=Count("pk", filter=Q(state=State.ERROR, timed_out=False)),
            timeouts=Count("pk", filter=Q(timed_out=True)),
            # In doubt now, or once: its owner decided since.
            in_doubt=Count("pk", filter=Q(state=State.IN_DOUBT) | ~Q(decision="")),
            denied=Count("pk", filter=Q(state__in=[State.DENIED, State.EXPIRED])),
        )
        .order_by("-calls", "tool", "source")
    )
    took = defaultdict(list)
    # Only the calls that ran to their end: a skipped one's end is its owner's decision.
    ran = calls.filter(
        state__in=[State.DONE, State.ERROR], started_at__isnull=False, ended_at__isnull=False
    )
    for tool, source, started, ended in ran.values_list("tool", "source", "started_at", "ended_at"):
        took[tool, source].append(max((ended - started).total_seconds(), 0.0))
    for seconds in took.values():
        seconds.sort()
    return [
        ToolUse(
            **row,
            p50=percentile(took[row["tool"], row["source"]], 0.5),
            p95=percentile(took[row["tool"], row["source"]], 0.95),
        )
        for row in rows
    ]


@never_cache
@require_GET
@staff_required
def tools_view(request: HttpRequest) -> HttpResponse:
    period = request.GET.get("range", "24h")
    if period not in RANGES:
        period = "24h"
    said, span = RANGES[period]
    calls = ToolCall.objects.filter(created_at__gte=database_now() - span)
    failures = (
        # Ended in error, timed out, or cut off by a crash (in doubt now, or decided since).
        calls.filter(
            Q(state__in=[State.ERROR, State.IN_DOUBT]) | Q(timed_out=True) | ~Q(decision="")
        )
        .select_related("message__conversation")
        .order_by("-created_at", "-pk")[:FAILURES_SHOWN]
    )
    return render(
        request,
        "dashboard/tools.html",
        {
            "range": period,
            "range_said": said,
            "tools": tools_used(calls),
            "failures": failures,
        },
    )
