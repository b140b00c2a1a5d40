"""What happened, five minutes at a time: the console's history charts and /metrics' counters.

Counting rows when a page or a scrape asks is slow at millions of messages, and goes backwards
once retention deletes them (a Prometheus counter must never fall). So each five minutes are
counted once, when they are over, into a `HistoryBucket` that retention leaves alone; readers
add the minutes not rolled up yet, counted from the rows. The watchdog rolls buckets up and
samples the queue depth into the current one (`history_record`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta

from django.db.models import Count, F, Max, Min, Q, Sum, Value
from django.db.models.functions import Greatest

from ..database.clock import database_now
from ..models import DeadLetter, HistoryBucket, Message, Recovery, Run, ToolCall

logger = logging.getLogger(__name__)

BUCKET = timedelta(minutes=5)
# A bucket is counted this long after it ends: commits that were under way, and the rows a web
# host with a skewed clock stamped, are in it by then.
ROLL_UP_AFTER = timedelta(minutes=2)
# At most this many buckets per call, which the watchdog makes between its sweeps: a first
# roll-up over a long history goes three hours at a time, without holding the sweeps up.
ROLL_UP_MAX = 36

# The bounds (seconds) of the time from a message to its reply, counted per bucket: fine enough
# for a p50 and p95 read from them, and holding /metrics' histogram buckets.
REPLY_BOUNDS_SECONDS = (
    0.025, 0.05, 0.1, 0.15, 0.25, 0.35, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 20, 30,
    45, 60, 120, 300, 600,
)  # fmt: skip


# The bounds (seconds) of a tool call's run time, counted per bucket and tool.
TOOL_BOUNDS_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
# The label of calls of a tool that was not offered (the model named one that does not
# exist): never the model's own words, which would make a series per word.
UNKNOWN_TOOL = "(unknown)"


def zeros() -> list[int]:
    return [0] * (len(REPLY_BOUNDS_SECONDS) + 1)


def added(mine: dict, theirs: dict, add) -> dict:
    """Two per-key dicts summed, each key's values by `add`."""
    return {
        key: add(mine[key], theirs[key])
        if key in mine and key in theirs
        else mine.get(key, theirs.get(key))
        for key in mine.keys() | theirs.keys()
    }


def counts_added(mine: dict[str, int], theirs: dict[str, int]) -> dict[str, int]:
    return added(mine, theirs, lambda a, b: a + b)


def quantile(bounds: tuple, within: list[int], fraction: float) -> float | None:
    """The value within which `fraction` of the counted fall, interpolated within its bound
    as Prometheus' histogram_quantile does; None when nothing was counted."""
    total = sum(within)
    if not total:
        return None
    rank, seen, lower = fraction * total, 0, 0.0
    for upper, count in zip(bounds, within, strict=False):
        if count and seen + count >= rank:
            return lower + (upper - lower) * (rank - seen) / count
        seen, lower = seen + count, upper
    return bounds[-1]  # beyond the last bound: at least that


@dataclass
class Counts:
    """What happened over a span: replies stored (with the time each took, per bound and the
    ones beyond the last), attempts ended by outcome, recoveries, dead letters."""

    answered: int = 0
    reply_seconds: float = 0.0
    replies_within: list[int] = field(default_factory=zeros)  # not cumulative; the last: beyond
    attempts: dict[str, int] = field(default_factory=dict)
    recoveries: int = 0
    dead_letters: int = 0
    # Tool calls ended, by tool, then outcome; their run times, by tool (sum, and per bound).
    tool_calls: dict[str, dict[str, int]] = field(default_factory=dict)
    tool_seconds: dict[str, float] = field(default_factory=dict)
    tool_seconds_within: dict[str, list[int]] = field(default_factory=dict)

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            answered=self.answered + other.answered,
            reply_seconds=self.reply_seconds + other.reply_seconds,
            replies_within=[
                a + b for a, b in zip(self.replies_within, other.replies_within, strict=True)
            ],
            attempts={
                outcome: self.attempts.get(outcome, 0) + other.attempts.get(outcome, 0)
                for outcome in self.attempts.keys() | other.attempts.keys()
            },
            recoveries=self.recoveries + other.recoveries,
            dead_letters=self.dead_letters + other.dead_letters,
            tool_calls=added(self.tool_calls, other.tool_calls, counts_added),
            tool_seconds=added(self.tool_seconds, other.tool_seconds, lambda a, b: a + b),
            tool_seconds_within=added(
                self.tool_seconds_within,
                other.tool_seconds_within,
                lambda a, b: [x + y for x, y in zip(a, b, strict=True)],
            ),
        )

    @property
    def crashes(self) -> int:
        return self.attempts.get(Run.State.CRASHED, 0)

    @property
    def interruptions(self) -> int:
        return self.attempts.get(Run.State.INTERRUPTED, 0)

    def reply_quantile(self, fraction: float) -> float | None:
        """The time within which `fraction` of the replies came, in seconds; None without
        replies."""
        return quantile(REPLY_BOUNDS_SECONDS, self.replies_within, fraction)

    @classmethod
    def of(cls, bucket: HistoryBucket) -> Counts:
        """A rolled-up bucket's own counts: its columns are named as these fields."""
        return cls.from_json({each.name: getattr(bucket, each.name) for each in fields(cls)})

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Counts:
        return cls(**data) if data else cls()


def bucket_start(moment: datetime) -> datetime:
    moment = moment.astimezone(UTC)
    return moment.replace(minute=moment.minute - moment.minute % 5, second=0, microsecond=0)


def counts_between(start: datetime, end: datetime) -> Counts:
    """Counted from the rows: replies stored, attempts ended, recoveries and dead letters made
    in [start, end)."""
    # Question and reply are stamped by different hosts; skew must not give a negative time.
    delay = Greatest(F("created_at") - F("reply_to__created_at"), Value(timedelta(0)))
    bounds = [timedelta(seconds=bound) for bound in REPLY_BOUNDS_SECONDS]
    within = [
        Q(delay__lte=upper) & (Q(delay__gt=lower) if lower is not None else Q())
        for lower, upper in zip([None, *bounds], bounds, strict=False)
    ]
    replies = (
        Message.objects.filter(
            state=Message.State.DONE,
            created_at__gte=start,
            created_at__lt=end,
            role=Message.Role.ASSISTANT,
            reply_to__isnull=False,
        )
        .annotate(delay=delay)
        .aggregate(
            answered=Count("pk"),
            total=Sum("delay"),
            beyond=Count("pk", filter=Q(delay__gt=bounds[-1])),
            **{f"within_{i}": Count("pk", filter=q) for i, q in enumerate(within)},
        )
    )
    attempts = dict(
        Run.objects.filter(ended_at__gte=start, ended_at__lt=end)
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    return Counts(
        **tool_counts_between(start, end),
        answered=replies["answered"],
        reply_seconds=replies["total"].total_seconds() if replies["total"] else 0.0,
        replies_within=[replies[f"within_{i}"] for i in range(len(within))] + [replies["beyond"]],
        attempts=attempts,
        recoveries=Recovery.objects.filter(resumed_at__gte=start, resumed_at__lt=end).count(),
        dead_letters=DeadLetter.objects.filter(created_at__gte=start, created_at__lt=end).count(),
    )


def tool_counts_between(start: datetime, end: datetime) -> dict:
    """The tool calls that ended in [start, end): by tool and outcome, and their run times."""
    ended = ToolCall.objects.filter(ended_at__gte=start, ended_at__lt=end)
    calls: dict[str, dict[str, int]] = {}
    rows = ended.values_list("tool", "source", "state", "timed_out").annotate(n=Count("pk"))
    for tool, source, state, timed_out, n in rows:
        outcome = "timeout" if state == ToolCall.State.ERROR and timed_out else state
        by_outcome = calls.setdefault(tool if source else UNKNOWN_TOOL, {})
        by_outcome[outcome] = by_outcome.get(outcome, 0) + n
    took = Greatest(F("ended_at") - F("started_at"), Value(timedelta(0)))
    bounds = [timedelta(seconds=bound) for bound in TOOL_BOUNDS_SECONDS]
    within = [
        Q(took__lte=upper) & (Q(took__gt=lower) if lower is not None else Q())
        for lower, upper in zip([None, *bounds], bounds, strict=False)
    ]
    timed = (  # only the calls that ran to their end (a skipped one ends at a decision)
        ended.filter(
            state__in=[ToolCall.State.DONE, ToolCall.State.ERROR], started_at__isnull=False
        )
        .exclude(source="")
        .annotate(took=took)
        .values("tool")
        .annotate(
            total=Sum("took"),
            beyond=Count("pk", filter=Q(took__gt=bounds[-1])),
            **{f"within_{i}": Count("pk", filter=q) for i, q in enumerate(within)},
        )
    )
    return {
        "tool_calls": calls,
        "tool_seconds": {row["tool"]: row["total"].total_seconds() for row in timed},
        "tool_seconds_within": {
            row["tool"]: [row[f"within_{i}"] for i in range(len(within))] + [row["beyond"]]
            for row in timed
        },
    }


def queue_depth() -> int:
    return Message.objects.waiting().count()


def history_record() -> int:
    """The watchdog's part: the queue depth sampled into the current bucket (its highest
    sample is kept), and the buckets that are over rolled up, each once however many
    watchdogs run. How many were rolled up."""
    now = database_now()
    current = bucket_start(now)
    depth = queue_depth()
    sampled, made = HistoryBucket.objects.get_or_create(
        start=current, defaults={"queue_depth": depth}
    )
    if not made:
        HistoryBucket.objects.filter(pk=sampled.pk).update(
            queue_depth=Greatest(F("queue_depth"), Value(depth))
        )
    rolled = 0
    for start in buckets_to_roll_up(now):
        counts = counts_between(start, start + BUCKET)
        before = HistoryBucket.objects.filter(start=start - BUCKET, rolled_up=True).first()
        totals = (Counts.from_json(before.totals) if before else Counts()) + counts
        HistoryBucket.objects.get_or_create(start=start)
        rolled += HistoryBucket.objects.filter(start=start, rolled_up=False).update(
            rolled_up=True, totals=totals.as_json(), **counts.as_json()
        )
    if rolled:
        logger.info("History: %s bucket(s) of five minutes rolled up", rolled)
    return rolled


def rolled_up_through() -> datetime | None:
    """Where the rolled-up buckets end: what is after it is counted from the rows."""
    last = HistoryBucket.objects.filter(rolled_up=True).aggregate(last=Max("start"))["last"]
    return last + BUCKET if last else None


def buckets_to_roll_up(now: datetime) -> list[datetime]:
    """From the end of the rolled-up ones (or the first row there is) to the last bucket over
    by ROLL_UP_AFTER, at most ROLL_UP_MAX of them."""
    first = rolled_up_through() or history_begins()
    if first is None:
        return []
    last = bucket_start(now - ROLL_UP_AFTER - BUCKET)
    count = min(ROLL_UP_MAX, int((last - first) / BUCKET) + 1)
    return [first + i * BUCKET for i in range(max(0, count))]


def history_begins() -> datetime | None:
    """The bucket of the oldest message: where a first roll-up starts."""
    # Read only until the first bucket is rolled up: the buckets say where to go on from.
    oldest = Message.objects.aggregate(oldest=Min("created_at"))["oldest"]
    return bucket_start(oldest) if oldest else None


def counts_ever() -> Counts:
    """Everything through the last rolled-up bucket (/metrics' counters). Not the minutes since:
    counted from the rows, they would fall when a conversation is deleted or an attempt is
    withdrawn; rolled up, they never do. They lag by up to ROLL_UP_AFTER + two buckets."""
    last = HistoryBucket.objects.filter(rolled_up=True).order_by("-start").first()
    return Counts.from_json(last.totals) if last else Counts()


# Buckets not rolled up yet are counted from the rows for at most this long back: with the
# watchdog running that is the last few minutes; without it, the page says the history lags.
LIVE_AT_MOST = timedelta(hours=3)


@dataclass(frozen=True)
class Span:
    start: datetime
    counts: Counts
    queue_depth: int | None


@dataclass(frozen=True)
class History:
    spans: list[Span]
    rolled_up_through: datetime | None
    lagging: bool  # buckets the watchdog should have rolled up are missing


def history_spans(*, start: datetime, span: timedelta, count: int) -> History:
    """`count` spans of `span` (a multiple of five minutes) from `start`: the rolled-up
    buckets summed, the last minutes counted from the rows; the queue depth the highest
    sampled."""
    now = database_now()
    end = start + span * count
    buckets = {
        bucket.start: bucket
        for bucket in HistoryBucket.objects.filter(start__gte=start, start__lt=end)
    }
    through = rolled_up_through()
    earliest_live = bucket_start(now - LIVE_AT_MOST)
    live_from = max(through or earliest_live, earliest_live)
    lagging = through is not None and through < bucket_start(now - ROLL_UP_AFTER - 3 * BUCKET)
    spans = []
    for index in range(count):
        begins = start + index * span
        counts, depth = Counts(), None
        moment = begins
        while moment < begins + span:
            bucket = buckets.get(moment)
            if bucket is not None and bucket.rolled_up:
                counts += Counts.of(bucket)
            elif live_from <= moment <= now:
                counts += counts_between(moment, moment + BUCKET)
            if bucket is not None and bucket.queue_depth is not None:
                depth = max(depth or 0, bucket.queue_depth)
            moment += BUCKET
        spans.append(Span(start=begins, counts=counts, queue_depth=depth))
    return History(spans=spans, rolled_up_through=through, lagging=lagging)
