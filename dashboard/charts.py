"""A bar chart drawn as SVG on the server: readable without JavaScript, no chart library."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .selectors import TimelineBar

WIDTH, HEIGHT, AXIS = 720, 130, 28
TICKS = 6
# How a tick and a tooltip word a span's start: the server writes UTC, and console.js rewrites
# each in the reader's time zone when they choose it (the datetime travels in data-clock-at).
WEEKDAY_TIME, TIME = "weekday-time", "time"
CLOCK_FORMATS = {WEEKDAY_TIME: "%a %H:%M", TIME: "%H:%M"}


@dataclass(frozen=True)
class Tick:
    """The label under a bar: `minor` ticks (every other one) give way on narrow screens."""

    at: datetime
    clock: str  # WEEKDAY_TIME or TIME
    minor: bool

    def __str__(self) -> str:
        return self.at.strftime(CLOCK_FORMATS[self.clock])


def tick_at(index: int, start: datetime, *, every: int, clock: str) -> Tick | None:
    if index % every:
        return None
    return Tick(at=start, clock=clock, minor=bool((index // every) % 2))


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    bar: TimelineBar
    tick: Tick | None  # the label under this bar, if it gets one


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int
    total: int
    width: int = WIDTH
    height: int = HEIGHT
    axis: int = AXIS

    @property
    def baseline(self) -> int:
        return self.height - self.axis


def timeline_chart(timeline: list[TimelineBar]) -> Chart:
    """One bar per hour, scaled to the busiest hour; an hour without crashes has no bar."""
    peak = max((bar.crashes for bar in timeline), default=0)
    slot = WIDTH / max(1, len(timeline))
    plot = HEIGHT - AXIS
    every = max(1, len(timeline) // TICKS)
    clock = TIME if len(timeline) <= 24 else WEEKDAY_TIME
    bars = []
    for index, bar in enumerate(timeline):
        height = plot * bar.crashes / peak if peak else 0
        tick = tick_at(index, bar.start, every=every, clock=clock)
        bars.append(
            Bar(
                x=index * slot + 1,
                y=plot - height,
                width=max(1.0, slot - 2),
                height=height,
                bar=bar,
                tick=tick,
            )
        )
    return Chart(bars=bars, peak=peak, total=sum(bar.crashes for bar in timeline))


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    width: float
    height: float
    value: float | None
    at: datetime
    tooltip: str  # the span and its value in words, "{time}" standing for the span's start
    tick: Tick | None

    @property
    def tooltip_utc(self) -> str:
        return self.tooltip.replace("{time}", f"{self.at:%a %H:%M} UTC")

    @property
    def centre(self) -> float:
        return self.x + self.width / 2


@dataclass(frozen=True)
class Series:
    name: str
    css: str  # the class its bars or line are drawn with
    points: list[Point]

    @property
    def polyline(self) -> str:
        """The line through the points that have a value, for a line chart."""
        return " ".join(f"{p.centre:.1f},{p.y:.1f}" for p in self.points if p.value is not None)


@dataclass(frozen=True)
class HistoryChart:
    """One measure (or two, for a line chart) over the spans of a history."""

    title: str
    summary: str  # what the chart shows, in one sentence: its text alternative
    series: list[Series]
    peak: float
    line: bool
    width: int = WIDTH
    height: int = HEIGHT
    axis: int = AXIS

    @property
    def baseline(self) -> int:
        return self.height - self.axis


def history_chart(
    *,
    title: str,
    summary: str,
    starts: list,
    series: list[tuple[str, str, list[float | None]]],
    describe,
    line: bool = False,
    hourly: bool = False,
) -> HistoryChart:
    """Bars (or lines) for `series` ((name, css class, a value per span)), scaled to the
    highest value; `describe` words a value for the tooltips."""
    peak = max((v for _, _, values in series for v in values if v is not None), default=0)
    slot = WIDTH / max(1, len(starts))
    plot = HEIGHT - AXIS
    every = max(1, len(starts) // TICKS)
    clock = WEEKDAY_TIME if hourly else TIME
    span = "hour" if hourly else "5 minutes"
    drawn = []
    for name, css, values in series:
        points = []
        for index, (start, value) in enumerate(zip(starts, values, strict=True)):
            height = plot * value / peak if peak and value else 0
            said = "no data" if value is None else describe(value)
            points.append(
                Point(
                    x=index * slot + 1,
                    y=plot - height,
                    width=max(1.0, slot - 2),
                    height=height,
                    value=value,
                    at=start,
                    tooltip=f"{name}, {span} from {{time}}: {said}",
                    tick=tick_at(index, start, every=every, clock=clock),
                )
            )
        drawn.append(Series(name=name, css=css, points=points))
    return HistoryChart(title=title, summary=summary, series=drawn, peak=peak, line=line)
