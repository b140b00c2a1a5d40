"""The History page: what happened over 24 hours or 7 days, from the history's buckets."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from continuity.database.clock import database_now
from continuity.delivery import BUCKET, Counts, History, bucket_start, history_spans
from continuity.words import plural

from .charts import history_chart
from .decorators import staff_required

RANGES = {"24h": (BUCKET, 288), "7d": (timedelta(hours=1), 168)}


def seconds(value: float) -> str:
    return f"{value:.2f} s" if value < 10 else f"{value:.0f} s"


def count_of(noun: str):
    return lambda value: plural(value, noun)


def charts_of(history: History, *, hourly: bool) -> list[tuple[str, object]]:
    spans = history.spans
    starts = [span.start for span in spans]
    whole = sum((span.counts for span in spans), Counts())
    period = "7 days" if hourly else "24 hours"
    per = "an hour" if hourly else "5 minutes"

    def bars(chart_id, title, noun, values, css="bar"):
        total, peak = sum(values), max(values, default=0)
        summary = f"{total} over the last {period}" + (f"; at most {peak} in {per}" if peak else "")
        chart = history_chart(
            title=title,
            summary=summary,
            starts=starts,
            series=[(title, css, values)],
            describe=count_of(noun),
            hourly=hourly,
        )
        return chart_id, chart

    p50, p95 = whole.reply_quantile(0.5), whole.reply_quantile(0.95)
    latency = history_chart(
        title="Time from message to reply",
        summary=(
            f"p50 {seconds(p50)} and p95 {seconds(p95)} over the last {period}"
            if p50 is not None
            else f"no reply in the last {period}"
        ),
        starts=starts,
        series=[
            ("p50", "p50", [span.counts.reply_quantile(0.5) for span in spans]),
            ("p95", "p95", [span.counts.reply_quantile(0.95) for span in spans]),
        ],
        describe=seconds,
        line=True,
        hourly=hourly,
    )
    depths = [span.queue_depth for span in spans]
    sampled = [depth for depth in depths if depth is not None]
    queue = history_chart(
        title="Queue depth",
        summary=(
            f"at most {max(sampled)} messages waiting at once over the last {period}"
            if sampled
            else f"not sampled in the last {period} (the watchdog samples it)"
        ),
        starts=starts,
        series=[("Queue depth", "bar neutral", depths)],
        describe=count_of("message"),
        hourly=hourly,
    )
    return [
        bars(
            "answered", "Messages answered", "reply", [s.counts.answered for s in spans], "bar ok"
        ),
        ("latency", latency),
        bars("crashes", "Crashes", "crash", [s.counts.crashes for s in spans]),
        bars(
            "recoveries",
            "Recoveries",
            "recovery",
            [s.counts.recoveries for s in spans],
            "bar neutral",
        ),
        bars(
            "interruptions",
            "Interruptions",
            "interruption",
            [s.counts.interruptions for s in spans],
            "bar neutral",
        ),
        bars("dead-letters", "Dead letters", "dead letter", [s.counts.dead_letters for s in spans]),
        ("queue", queue),
    ]


@never_cache
@require_GET
@staff_required
def history_view(request: HttpRequest) -> HttpResponse:
    chosen = request.GET.get("range", "24h")
    if chosen not in RANGES:
        chosen = "24h"
    span, count = RANGES[chosen]
    now = bucket_start(database_now())
    last = now if span == BUCKET else now.replace(minute=0)
    history = history_spans(start=last - span * (count - 1), span=span, count=count)
    return render(
        request,
        "dashboard/history.html",
        {
            "range": chosen,
            "charts": charts_of(history, hourly=span != BUCKET),
            "history": history,
            "sample_seconds": settings.CONTINUITY_HISTORY_EVERY_SECONDS,
        },
    )
