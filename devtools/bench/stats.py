"""Figures: every one is the median of its repetitions; latencies keep their p50 and p99."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation between ranks, as numpy's default."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Figure:
    """One row of the table: `reps` holds one value per repetition; the figure is their median."""

    name: str
    unit: str
    reps: list[float]
    note: str = ""

    @property
    def value(self) -> float:
        return statistics.median(self.reps) if self.reps else math.nan


def latency_figures(name: str, samples_per_rep: list[list[float]], *, unit: str = "ms"):
    """p50 and p99 of each repetition's samples (seconds, shown in ms), as two figures."""
    scale = 1000 if unit == "ms" else 1
    return [
        Figure(f"{name} p{q}", unit, [percentile(s, q) * scale for s in samples_per_rep])
        for q in (50, 99)
    ]


@dataclass
class Section:
    """What one section measured: its figures, and notes and detail tables for the report."""

    key: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    def figure(self, name: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name), None)


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.nan
