"""The benchmark harness (`manage.py bench`): its counting and statistics, and a smoke run of
every section with real processes, so that it never rots. Nothing here judges a timing."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from devtools.bench.counting import Cost, sql_tally, statement_kind
from devtools.bench.plan import Plan
from devtools.bench.report import NUMBERS, Report, markdown, run_verdicts, text_table
from devtools.bench.run import SECTIONS
from devtools.bench.stats import Figure, Section, percentile
from devtools.bench.targets import met_shown
from tests.helpers.processes import command_env

# The suite's session fixtures expect the test database; these tests do not touch it (the smoke
# run makes a database of its own, named after it).
pytestmark = pytest.mark.django_db
FIGURE_ROW = re.compile(r"^\| (?P<name>[^|]+) \| (?P<value>[^|]+) \| (?P<unit>[^|]+) \|")


def test_percentiles_interpolate_between_ranks():
    samples = [float(n) for n in range(1, 101)]
    assert percentile(samples, 50) == 50.5
    assert percentile(samples, 99) == 99.01
    assert percentile([3.0], 99) == 3.0


def test_each_atomic_block_and_each_autocommit_statement_is_one_transaction():
    cost = Cost()
    log = [
        'SELECT "a"."id" FROM "continuity_message" WHERE x',  # autocommit
        "BEGIN",
        'SELECT "b"."id" FROM "continuity_run" WHERE "b"."id" = 1 LIMIT 1 FOR UPDATE',
        'SAVEPOINT "s1"',
        'INSERT INTO "continuity_checkpoint" ("a") VALUES (1)',
        'RELEASE SAVEPOINT "s1"',
        "COMMIT",
        "BEGIN",  # an atomic block that ran nothing: no transaction reached the server
        "COMMIT",
        'UPDATE "continuity_run" SET "state" = 1',  # autocommit
    ]
    sql_tally(cost, [{"sql": sql} for sql in log])
    assert (cost.statements, cost.transactions, cost.round_trips) == (6, 3, 10)
    assert cost.statement_kinds == {
        "SELECT continuity_message": 1,
        "SELECT continuity_run FOR UPDATE": 1,
        "SAVEPOINT": 1,
        "INSERT continuity_checkpoint": 1,
        "RELEASE SAVEPOINT": 1,
        "UPDATE continuity_run": 1,
    }


def test_statements_sent_together_are_one_round_trip_with_the_begin_before_them():
    cost = Cost()
    log = [
        {"sql": "BEGIN"},
        {"sql": "SELECT id FROM continuity_conversation WHERE id = 1 FOR UPDATE", "batch": 1},
        {"sql": "SELECT id FROM continuity_message WHERE id = 2", "batch": 1},
        {"sql": "UPDATE continuity_message SET state = 'done' RETURNING id", "batch": 2},
        {"sql": "INSERT INTO continuity_run (state) VALUES ('running') RETURNING id", "batch": 2},
        {"sql": "SELECT id FROM continuity_handoff"},
        {"sql": "COMMIT"},
    ]
    sql_tally(cost, log)
    assert (cost.statements, cost.transactions, cost.round_trips) == (5, 1, 4)
    assert cost.statement_kinds["SELECT continuity_conversation FOR UPDATE"] == 1


def test_a_commit_sent_with_a_batch_is_one_transaction_in_its_round_trip():
    cost = Cost()
    log = [
        {"sql": "BEGIN"},
        {"sql": "UPDATE continuity_conversation SET title = 'x' RETURNING id", "batch": 1},
        {"sql": "INSERT INTO continuity_message (text) VALUES ('x') RETURNING id", "batch": 1},
        {"sql": "COMMIT", "batch": 1},
        {"sql": "COMMIT"},  # the block's own, which found nothing left to commit
    ]
    sql_tally(cost, log)
    assert (cost.statements, cost.transactions, cost.round_trips) == (2, 1, 1)


def test_a_statement_with_a_subquery_is_named_by_its_own_table():
    sql = (
        'INSERT INTO "continuity_replychunk" (message_id) SELECT 1 WHERE EXISTS '
        '(SELECT 1 FROM "continuity_run" WHERE id = 2 FOR SHARE)'
    )
    assert statement_kind(sql) == "INSERT continuity_replychunk"


@pytest.mark.processes
@pytest.mark.postgresql("make bench measures the production database, PostgreSQL")
def test_the_smoke_run_reports_every_section_with_numbers(tmp_path):
    output = tmp_path / "benchmarks.md"
    env = command_env()
    result = subprocess.run(
        [sys.executable, "manage.py", "bench", "--smoke", "--output", str(output),
         "--database", f"{connection.settings_dict['NAME']}_bench"],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip

    assert result.returncode == 0, result.stderr[-5000:]
    markdown = output.read_text()
    for key in SECTIONS:
        assert f"\n## {NUMBERS[key]}. " in markdown
        assert f"\n{NUMBERS[key]}. " in result.stdout
    for heading in ("Commit", "Machine", "Versions", "PostgreSQL", "Redis", "Celery"):
        assert heading.lower() in markdown.lower()
    targets, sections = markdown.split("\n## 1. ")
    assert "## Targets" in targets
    # At the smoke run's sizes, the targets bound to their sizes are not measured.
    assert "| 200 websocket clients × 10 messages: 0 errors | — | not measured |" in targets
    assert re.search(r"\| message_accept p50 ≤ 3 ms \| [\d.]+ ms \| not judged", targets)
    rows = [row for row in map(FIGURE_ROW.match, sections.splitlines()) if row]
    figures = [row for row in rows if row["name"] != "Figure" and "---" not in row["name"]]
    assert len(figures) > 40
    unmeasured = [row["name"] for row in figures if not re.match(r"^-?[\d,.]+$", row["value"])]
    assert unmeasured == [], unmeasured


def test_the_report_puts_each_target_beside_this_runs_figure():
    sections = [
        Section(
            "throughput",
            "Throughput",
            figures=[
                Figure("messages, accept to reply committed", "messages/s", [240.0, 260.0, 255.0]),
                Figure("ratio to the no-op baseline", "ratio", [0.3, 0.31, 0.29]),
            ],
        ),
        Section(
            "latency",
            "Latency",
            figures=[
                Figure("accept → reply committed p50", "ms", [12.0]),
                Figure("message_accept alone p50", "ms", [3.0]),
            ],
        ),
        Section(
            "growth",
            "Growth",
            figures=[
                Figure("accept → reply at 100 prior messages p50", "ms", [9.0]),
                Figure("  ratio to 100", "ratio", [1.0]),
                Figure("accept → reply at 100,000 prior messages p50", "ms", [11.0]),
                Figure("  ratio to 100", "ratio", [1.25]),
            ],
        ),
        Section("tools", "A tool round", figures=[Figure("added by the call, p50", "ms", [2.0])]),
    ]
    report = Report(sections, "", 300, "", "", {}, {}, Plan())

    rows = [(v.wording, v.measured, met_shown(v)) for v in run_verdicts(report)]

    assert rows == [
        ("throughput ≥ 250 messages/s", "255.0 messages/s", "yes"),
        ("throughput ≥ 0.25× the no-op baseline of the same run", "0.3×", "yes"),
        ("one message at a time, accept → reply committed p50 ≤ 10 ms", "12.0 ms", "no"),
        ("message_accept p50 ≤ 3 ms", "3.0 ms", "yes"),
        ("a built-in tool call adds ≤ 3 ms at p50 to a reply", "2.0 ms", "yes"),
        ("accept → reply at 100,000 prior messages ≤ 1.2× that at 100", "1.25×", "no"),
        ("200 websocket clients × 10 messages: 0 errors", "", "not measured"),
        # Not every section ran: this run's duration is not the one the targets bound.
        ("`make bench` in under 10 minutes", "", "not measured"),
    ]
    assert "| message_accept p50 ≤ 3 ms | 3.0 ms | yes |" in markdown(report)
    assert any(line.startswith("Target ") for line in text_table(report).splitlines())


@pytest.mark.parametrize(("minutes", "met"), [(9.5, "yes"), (10.5, "no")])
def test_a_full_run_at_the_targets_sizes_is_judged_by_its_duration(minutes, met):
    sections = [Section(key, key) for key in SECTIONS]
    report = Report(sections, "", minutes * 60, "", "", {}, {}, Plan())

    *_, duration = run_verdicts(report)

    assert (duration.measured, met_shown(duration)) == (f"{minutes:.1f} min", met)
