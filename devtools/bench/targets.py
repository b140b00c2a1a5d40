"""The benchmark's targets, each beside this run's figure and whether the run met it.

The targets name their sizes (100,000 prior messages, 200 clients × 10 messages, a full
run): a run at other sizes shows its figures unjudged. The absolute ones (messages/s, ms) were
set on the machine they were first measured on, whose no-op Celery baseline is given beside them,
so that a reader can tell a slower machine from a slower engine."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .stats import Figure, Section

# The machine the targets were set on: its no-op baseline (section 1).
TARGETS_BASELINE = "848 tasks/s, round trip p50 1.6 ms"
FULL_RUN_MINUTES = 10


@dataclass(frozen=True)
class Target:
    wording: str
    section: str
    figure: str
    bound: float
    at_most: bool  # the figure must be ≤ bound (else ≥ bound)
    of_ratio: bool = False  # the ratio row listed right after `figure`

    def met_by(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound


TARGETS = (
    Target(
        "throughput ≥ 250 messages/s",
        "throughput",
        "messages, accept to reply committed",
        250,
        at_most=False,
    ),
    Target(
        "throughput ≥ 0.25× the no-op baseline of the same run",
        "throughput",
        "ratio to the no-op baseline",
        0.25,
        at_most=False,
    ),
    Target(
        "one message at a time, accept → reply committed p50 ≤ 10 ms",
        "latency",
        "accept → reply committed p50",
        10,
        at_most=True,
    ),
    Target("message_accept p50 ≤ 3 ms", "latency", "message_accept alone p50", 3, at_most=True),
    Target(
        "a built-in tool call adds ≤ 3 ms at p50 to a reply",
        "tools",
        "added by the call, p50",
        3,
        at_most=True,
    ),
    Target(
        "accept → reply at 100,000 prior messages ≤ 1.2× that at 100",
        "growth",
        "accept → reply at 100,000 prior messages p50",
        1.2,
        at_most=True,
        of_ratio=True,
    ),
    Target(
        "200 websocket clients × 10 messages: 0 errors",
        "streaming",
        "200 clients × 10: errors",
        0,
        at_most=True,
    ),
)


@dataclass(frozen=True)
class Verdict:
    wording: str
    measured: str  # empty when this run did not measure it
    met: bool | None  # None: not judged (not measured, or not at the targets' sizes)


def figure_of(target: Target, sections: dict[str, Section]) -> Figure | None:
    section = sections.get(target.section)
    if section is None:
        return None
    names = [f.name for f in section.figures]
    if target.figure not in names:
        return None
    at = names.index(target.figure) + (1 if target.of_ratio else 0)
    return section.figures[at] if at < len(section.figures) else None


def verdicts(
    sections: list[Section], *, seconds: float, issue_sizes: bool, full: bool, shown
) -> list[Verdict]:
    """`shown(value, unit)` formats a figure as the report does. `issue_sizes`: the run used
    the targets' sizes, so its figures are judged; `full`: every section ran too, so the run's
    duration is the one the targets bound."""
    by_key = {section.key: section for section in sections}
    found = []
    for target in TARGETS:
        figure = figure_of(target, by_key)
        if figure is None or math.isnan(figure.value):
            found.append(Verdict(target.wording, "", None))
            continue
        value = shown(figure.value, figure.unit)
        measured = f"{value}×" if figure.unit == "ratio" else f"{value} {figure.unit}"
        met = target.met_by(figure.value) if issue_sizes else None
        found.append(Verdict(target.wording, measured, met))
    found.append(
        Verdict(
            f"`make bench` in under {FULL_RUN_MINUTES} minutes",
            f"{seconds / 60:.1f} min" if full else "",
            seconds < FULL_RUN_MINUTES * 60 if full else None,
        )
    )
    return found


def met_shown(verdict: Verdict) -> str:
    if not verdict.measured:
        return "not measured"
    if verdict.met is None:
        return "not judged: other sizes than the targets'"
    return "yes" if verdict.met else "no"
