"""GET /metrics: Prometheus series about messages, attempts, dead letters and workers.

Every value is read from the database at scrape time, never kept in process memory, so all web
processes report the same numbers and they match what the database holds. Counters come from
the history's five-minute buckets and the minutes since, so retention never makes them fall.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from itertools import accumulate

from django.conf import settings
from django.db.models import (
    Count,
    Q,
)
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from continuity.delivery import REPLY_BOUNDS_SECONDS, TOOL_BOUNDS_SECONDS, Counts, counts_ever
from continuity.models import (
    TOOL_OUTCOMES,
    WAITING,
    Conversation,
    DeadLetter,
    Message,
    Run,
    Worker,
)

from .selectors import oldest_age, workers_live

REPLY_BUCKETS_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
RUN_OUTCOMES = [state for state in Run.State.values if state != Run.State.RUNNING]


def message_metrics() -> Iterator[Metric]:
    waiting = WAITING
    stats = Message.objects.filter(role=Message.Role.USER).aggregate(
        **{state: Count("pk", filter=Q(state=state)) for state in Message.State.values},
        oldest_waiting_age=oldest_age(among=waiting),
    )
    messages = GaugeMetricFamily(
        "continuity_messages", "User messages by processing state.", labels=["state"]
    )
    for state in Message.State.values:
        messages.add_metric([state], stats[state])
    yield messages
    yield GaugeMetricFamily(
        "continuity_queue_depth",
        "User messages waiting for a reply (queued or processing).",
        value=sum(stats[state] for state in Message.WAITING_STATES),
    )
    age = stats["oldest_waiting_age"]
    yield GaugeMetricFamily(
        "continuity_oldest_waiting_message_age_seconds",
        "Age of the oldest queued or processing user message; 0 when none waits.",
        # created_at comes from the web host's clock: a skewed host must not make it negative.
        value=max(age.total_seconds(), 0.0) if age else 0.0,
    )


def history_metrics() -> Iterator[Metric]:
    """Counters from the history's rolled-up buckets (delivery/history.py): they never fall when
    retention or a deletion removes the rows they counted."""
    counts = counts_ever()
    attempts = CounterMetricFamily(
        "continuity_attempts",
        "Processing attempts ended, in all (ended) and in each outcome; up to 9 minutes behind.",
        labels=["outcome"],
    )
    attempts.add_metric(["ended"], sum(counts.attempts.values()))
    for outcome in RUN_OUTCOMES:
        attempts.add_metric([outcome], counts.attempts.get(outcome, 0))
    yield attempts
    yield CounterMetricFamily(
        "continuity_recoveries",
        "Attempts that resumed what an interrupted one had done.",
        value=counts.recoveries,
    )
    yield CounterMetricFamily(
        "continuity_dead_lettered",
        "Messages set aside as dead letters.",
        value=counts.dead_letters,
    )
    yield reply_metric(counts)
    yield from tool_metrics(counts)


def tool_metrics(counts: Counts) -> Iterator[Metric]:
    """Tool calls ended, by tool and outcome, and their run times by tool."""
    calls = CounterMetricFamily(
        "continuity_tool_calls",
        "Tool calls ended, by tool and outcome (a call ended again after Run again counts "
        "again); up to 9 minutes behind.",
        labels=["tool", "outcome"],
    )
    for tool, outcomes in sorted(counts.tool_calls.items()):
        for outcome in TOOL_OUTCOMES:
            calls.add_metric([tool, outcome], outcomes.get(outcome, 0))
    yield calls
    seconds = HistogramMetricFamily(
        "continuity_tool_call_seconds",
        "How long tool calls ran, by tool.",
        labels=["tool"],
    )
    for tool, within in sorted(counts.tool_seconds_within.items()):
        cumulative = list(accumulate(within))
        buckets = [
            (floatToGoString(bound), cumulative[i]) for i, bound in enumerate(TOOL_BOUNDS_SECONDS)
        ]
        seconds.add_metric(
            [tool], [*buckets, ("+Inf", cumulative[-1])], counts.tool_seconds.get(tool, 0.0)
        )
    yield seconds


def dead_letter_metric() -> Metric:
    stats = DeadLetter.objects.aggregate(
        **{status: Count("pk", filter=Q(status=status)) for status in DeadLetter.Status.values}
    )
    dead_letters = GaugeMetricFamily(
        "continuity_dead_letters", "Dead letters by status.", labels=["status"]
    )
    for status in DeadLetter.Status.values:
        dead_letters.add_metric([status], stats[status])
    return dead_letters


def reply_metric(counts: Counts) -> Metric:
    """The replies per bound of the history, summed into Prometheus' cumulative buckets."""
    within = dict(zip(REPLY_BOUNDS_SECONDS, accumulate(counts.replies_within), strict=False))
    buckets = [(floatToGoString(bound), within[bound]) for bound in REPLY_BUCKETS_SECONDS]
    return HistogramMetricFamily(
        "continuity_reply_seconds",
        "Time from a user message to its stored reply.",
        buckets=[*buckets, ("+Inf", counts.answered)],
        sum_value=counts.reply_seconds,
    )


class ContinuityCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from message_metrics()
        yield from history_metrics()
        yield dead_letter_metric()
        yield GaugeMetricFamily(
            "continuity_conversations_paused",
            "Conversations paused after repeated crashes, waiting for staff.",
            value=Conversation.objects.filter(state=Conversation.State.PAUSED).count(),
        )
        yield GaugeMetricFamily(
            "continuity_workers_live",
            "Worker nodes running and seen within two heartbeat intervals "
            "(the watchdog's staleness rule).",
            value=Worker.objects.filter(workers_live()).count(),
        )


# Not the default registry: that one holds per-process metrics, which would differ between
# web processes. Without describe() and auto_describe, registering runs no query.
registry = CollectorRegistry(auto_describe=False)
registry.register(ContinuityCollector())


def bearer_token(request: HttpRequest) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def token_valid(request: HttpRequest) -> bool:
    expected = settings.CONTINUITY_METRICS_TOKEN
    # Bytes: compare_digest raises TypeError on a str with non-ASCII characters.
    return bool(expected) and hmac.compare_digest(bearer_token(request).encode(), expected.encode())


def access_refused(request: HttpRequest) -> HttpResponse | None:
    """None for a valid bearer token or signed-in staff; otherwise the response to send."""
    if token_valid(request) or request.user.is_staff:
        return None
    if request.user.is_authenticated:
        return HttpResponse("Staff only.\n", status=403, content_type="text/plain")
    response = HttpResponse("Authentication required.\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    if bearer_token(request):
        response["WWW-Authenticate"] += ', error="invalid_token"'
    return response


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if refused := access_refused(request):
        return refused
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
