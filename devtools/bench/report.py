"""The figures as a plain-text table (the terminal) and as Markdown (docs/benchmarks.md)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .plan import Plan
from .stats import Figure, Section
from .targets import TARGETS_BASELINE, Verdict, met_shown, verdicts

# The sections in report order.
# Report order (the sections' numbering).
SECTIONS = (
    "baseline", "throughput", "latency", "growth", "recovery", "streaming", "memory", "tools"
)  # fmt: skip
NUMBERS = {key: n for n, key in enumerate(SECTIONS, 1)}
DECIMALS = {"ms": 1, "s": 2, "MB": 1, "bytes": 0}


@dataclass
class Report:
    sections: list[Section]
    started: str
    seconds: float
    commit: str
    command: str
    machine: dict[str, str]
    versions: dict[str, str]
    plan: Plan


def shown(value: float, unit: str) -> str:
    if math.isnan(value):
        return "—"
    if unit in DECIMALS:
        return f"{value:,.{DECIMALS[unit]}f}"
    if unit == "ratio":
        return f"{value:.3g}"
    return f"{value:,.1f}" if value != int(value) or unit.endswith("/s") else f"{value:,.0f}"


def heading(section: Section) -> str:
    return f"{NUMBERS[section.key]}. {section.title}"


def reps_shown(figure: Figure) -> str:
    return ", ".join(shown(value, figure.unit) for value in figure.reps)


def run_verdicts(report: Report) -> list[Verdict]:
    issue_sizes = report.plan == Plan()
    full = issue_sizes and {s.key for s in report.sections} == set(NUMBERS)
    return verdicts(
        report.sections, seconds=report.seconds, issue_sizes=issue_sizes, full=full, shown=shown
    )


def columns(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows as aligned text: the second column right-aligned, the last one as it comes."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for *cells, last in rows:
        aligned = [
            f"{cell:>{width}}" if i == 1 else f"{cell:<{width}}"
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        lines.append("  ".join([*aligned, last]).rstrip())
    lines.insert(1, "-" * len(lines[0]))
    return lines


def text_table(report: Report) -> str:
    rows = [("Figure", "Value", "Unit", "Repetitions")]
    for section in report.sections:
        rows.append((heading(section), "", "", ""))
        rows += [
            (f"  {f.name}", shown(f.value, f.unit), f.unit, reps_shown(f)) for f in section.figures
        ]
    targets = [("Target", "This run", "Met")]
    targets += [(v.wording, v.measured or "—", met_shown(v)) for v in run_verdicts(report)]
    return "\n".join([*columns(rows), "", *columns(targets)])


def markdown(report: Report) -> str:
    parts = [
        "# Benchmarks",
        "",
        'Written by `make bench` (`python manage.py bench`; see docs/testing.md, "Benchmarks"). '
        "Every figure is the median of its repetitions, which are listed beside it; latencies give "
        "the p50 and p99 of each repetition's samples. Real processes throughout: Celery "
        "workers, daphne, the watchdog, a private redis-server and PostgreSQL, on one machine.",
        "",
        *run_table(report),
        "",
        *targets_table(report),
    ]
    for section in report.sections:
        parts += ["", f"## {heading(section)}", ""]
        parts += ["| Figure | Value | Unit | Repetitions |", "| --- | ---: | --- | --- |"]
        parts += [
            f"| {f.name.strip()} | {shown(f.value, f.unit)} | {f.unit} | {reps_shown(f)} |"
            for f in section.figures
        ]
        parts += ["", *(f"- {note}" for note in section.notes)]
        for detail in section.details:
            parts += ["", detail]
    return "\n".join(parts) + "\n"


def targets_table(report: Report) -> list[str]:
    rows = [f"| {v.wording} | {v.measured or '—'} | {met_shown(v)} |" for v in run_verdicts(report)]
    return [
        "## Targets",
        "",
        "| Target | This run | Met |",
        "| --- | ---: | --- |",
        *rows,
        "",
        "The absolute targets (messages/s, ms) were set on the machine they were first "
        f"measured on, whose no-op baseline (section 1) ran {TARGETS_BASELINE}.",
    ]


def run_table(report: Report) -> list[str]:
    minutes, seconds = divmod(round(report.seconds), 60)
    rows = {
        "Date": report.started,
        "Commit": report.commit,
        "Command": f"`{report.command}`",
        "Duration": f"{minutes} min {seconds} s",
        "Machine": ", ".join(f"{k} {v}" if k != "CPU" else v for k, v in report.machine.items()),
        "Versions": ", ".join(f"{k} {v}" for k, v in report.versions.items()),
        "Sizes": ", ".join(f"{k}={v}" for k, v in asdict(report.plan).items()),
    }
    return ["| Run | |", "| --- | --- |", *(f"| {k} | {v} |" for k, v in rows.items())]
