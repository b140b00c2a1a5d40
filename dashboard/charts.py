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
