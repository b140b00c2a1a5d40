from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from devtools.bench.plan import SMOKE, Plan
from devtools.bench.report import markdown, text_table
from devtools.bench.rig import BenchError
from devtools.bench.run import SECTIONS, bench_run

DEFAULT_OUTPUT = "docs/benchmarks.md"
SIZES = ("repetitions", "clients", "client_messages", "memory_messages")


class Command(BaseCommand):
    help = (
        "Measure the engine with real workers, Redis and PostgreSQL in a database of its own; "
        "print the figures and write them as Markdown."
    )

    def add_arguments(self, parser):
        add = parser.add_argument
        add(
            "--smoke",
            action="store_true",
            help="Tiny sizes, one repetition: checks that the harness works; its figures mean "
            "nothing.",
        )
        add(
            "--only",
            default=",".join(SECTIONS),
            help=f"Comma-separated sections to run (default all): {', '.join(SECTIONS)}.",
        )
        add(
            "--output",
            default=None,
            help=f"Markdown file to write (default {DEFAULT_OUTPUT} for a full run; with --only "
            "or --smoke, only when given).",
        )
        add(
            "--database",
            default="continuity_bench",
            help="Database created for the run on the configured PostgreSQL server (dropped "
            "first if it exists), and dropped after it (default continuity_bench).",
        )
        add("--keep-database", action="store_true", help="Leave the database after the run.")
        add(
            "--connection-limit",
            type=int,
            default=70,
            help="PostgreSQL connections the run may hold (default 70, so that a test run on "
            "the same server keeps some): its database is owned by a role of the same name "
            "with this CONNECTION LIMIT, which needs a server that trusts local logins. 0: "
            "log in as the configured user, without a limit.",
        )
        add("--repetitions", type=int, help="Repetitions of each figure (default 3).")
        add("--clients", type=int, help="Concurrent websocket clients (default 200).")
        add("--client-messages", type=int, help="Messages each client sends (default 10).")
        add(
            "--memory-messages",
            type=int,
            help="Messages between the two memory readings (default 10,000).",
        )

    def handle(self, *args, **options):
        if connection.vendor != "postgresql":
            raise CommandError("The benchmark needs PostgreSQL: set DATABASE_URL.")
        only = self.sections(options["only"])
        plan = self.plan(options)
        try:
            report = bench_run(
                plan=plan,
                only=only,
                database=options["database"],
                keep_database=options["keep_database"],
                connection_limit=options["connection_limit"],
                command=" ".join(["manage.py", *sys.argv[1:]]),
                say=lambda line: self.stderr.write(line),
            )
        except BenchError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(text_table(report))
        if output := self.output(options, full=only == list(SECTIONS)):
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(markdown(report))
            self.stderr.write(f"Wrote {output}")

    def sections(self, text: str) -> list[str]:
        only = [name.strip() for name in text.split(",") if name.strip()]
        if unknown := sorted(set(only) - set(SECTIONS)):
            raise CommandError(
                f"Unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}."
            )
        return [name for name in SECTIONS if name in only]

    def plan(self, options) -> Plan:
        sizes = {name: options[name] for name in SIZES if options[name] is not None}
        if any(value < 1 for value in sizes.values()):
            raise CommandError("Sizes must be positive.")
        return replace(SMOKE if options["smoke"] else Plan(), **sizes)

    def output(self, options, *, full: bool) -> Path | None:
        if options["output"]:
            return Path(options["output"])
        if full and not options["smoke"]:
            return Path(settings.BASE_DIR) / DEFAULT_OUTPUT
        return None
