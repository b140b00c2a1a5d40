"""A bar chart drawn as SVG on the server: readable without JavaScript, no chart library."""

from __future__ import annotations

from dataclasses import dataclass

from .selectors import TimelineBar

WIDTH, HEIGHT, AXIS = 720, 120, 18
TICKS = 6


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    bar: TimelineBar
    tick: str  # the label under this bar, if it gets one


@dataclass(frozen=True)
class Chart:
    bars: list[Bar]
    peak: int
    total: int
    width: int = WIDTH
    height: int = HEIGHT
    axis: int = AXIS


def timeline_chart(timeline: list[TimelineBar]) -> Chart:
    """One bar per hour, scaled to the busiest hour; an hour without crashes has no bar."""
    peak = max((bar.crashes for bar in timeline), default=0)
    slot = WIDTH / max(1, len(timeline))
    plot = HEIGHT - AXIS
    every = max(1, len(timeline) // TICKS)
    label = "%H:%M" if len(timeline) <= 24 else "%a %H:%M"
    bars = []
    for index, bar in enumerate(timeline):
        height = plot * bar.crashes / peak if peak else 0
        tick = bar.start.strftime(label) if index % every == 0 else ""
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
    tooltip: str  # the span and its value, in words
    tick: str

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
    label = "%a %H:%M" if hourly else "%H:%M"
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
                    tooltip=f"{name}, {span} from {start:%a %H:%M} UTC: {said}",
                    tick=start.strftime(label) if index % every == 0 else "",
                )
            )
        drawn.append(Series(name=name, css=css, points=points))
    return HistoryChart(title=title, summary=summary, series=drawn, peak=peak, line=line)
