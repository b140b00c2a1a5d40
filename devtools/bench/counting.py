"""What one operation costs: SQL statements, transactions and Redis commands, counted.

SQL comes from Django's query log (`CaptureQueriesContext`), which also records the BEGIN,
COMMIT and ROLLBACK of `transaction.atomic`. Redis comes from MONITOR on the run's private
server: unlike INFO commandstats, it tells the commands clients send apart from those their Lua
scripts run.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

TRANSACTION_CONTROL = {"BEGIN", "COMMIT", "ROLLBACK"}
VERB = re.compile(r"^\s*(RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT|SAVEPOINT|\w+)", re.IGNORECASE)
TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', re.IGNORECASE)
LOCK = re.compile(r"\bFOR (UPDATE|SHARE)\s*$", re.IGNORECASE)
MONITOR_LINE = re.compile(r'^[\d.]+ \[\d+ ([^\]]*)\] "([^"]*)"')


@dataclass
class Cost:
    statements: int = 0
    transactions: int = 0
    round_trips: int = 0  # statements, plus the BEGIN and COMMIT of explicit transactions
    redis_commands: int = 0  # sent by clients
    redis_in_scripts: int = 0  # run by Lua scripts on the server
    statement_kinds: Counter = field(default_factory=Counter)
    redis_kinds: Counter = field(default_factory=Counter)


def statement_kind(sql: str) -> str:
    """A statement's verb and table: `SELECT continuity_run FOR UPDATE`, `SAVEPOINT`…"""
    verb = VERB.match(sql)
    kind = verb.group(1).upper() if verb else sql.split(" ", 1)[0]
    if "SAVEPOINT" in kind:
        return kind
    if table := TABLE.search(sql):
        kind = f"{kind} {table.group(1)}"
    if kind.startswith("SELECT") and (lock := LOCK.search(sql)):
        kind += f" FOR {lock.group(1).upper()}"
    return kind


def sql_tally(cost: Cost, log: list[dict]) -> None:
    """Statements, transactions and round trips in a query log. Outside `atomic`, each
    statement is a transaction of its own (autocommit); an atomic block is one, if it ran
    anything. Statements sent together (`continuity.store.connection.batch`, marked in the
    log) are one round trip, which also carries the BEGIN before them, and the COMMIT after
    them when it was sent with them."""
    in_block = ran = False
    batch = None
    for index, entry in enumerate(log):
        word = entry["sql"].strip().upper()
        if word == "BEGIN":
            in_block, ran = True, False
            following = log[index + 1] if index + 1 < len(log) else {}
            cost.round_trips += following.get("batch") is None
        elif word in TRANSACTION_CONTROL:
            if in_block:  # a block commits once: when a batch carried it, Django's is a no-op
                cost.transactions += ran
                cost.round_trips += entry.get("batch") is None or entry["batch"] != batch
            in_block = False
        else:
            cost.statements += 1
            cost.round_trips += entry.get("batch") is None or entry["batch"] != batch
            cost.statement_kinds[statement_kind(entry["sql"])] += 1
            ran = True
            cost.transactions += not in_block
        batch = entry.get("batch")


class RedisTally:
    """Every command the server runs while open, from a MONITOR connection. Marker ECHOs
    frame the window, so nothing before or after it is counted, and nothing is missed."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.token = uuid.uuid4().hex
        self.sent: Counter = Counter()
        self.in_scripts: Counter = Counter()
        self._started = threading.Event()

    def __enter__(self) -> RedisTally:
        self._monitor = self.client.monitor().__enter__()
        self._thread = threading.Thread(target=self._listen, name="redis-tally", daemon=True)
        self._thread.start()
        self.client.echo(f"start-{self.token}")
        if not self._started.wait(10):
            raise RuntimeError("Redis MONITOR did not start")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.client.echo(f"stop-{self.token}")
        self._thread.join(10)
        self._monitor.__exit__()

    def _listen(self) -> None:
        while True:
            line = self._monitor.connection.read_response()
            line = line.decode(errors="replace") if isinstance(line, bytes) else str(line)
            if not (match := MONITOR_LINE.match(line)):
                continue
            client, command = match.group(1), match.group(2).upper()
            if command == "ECHO" and f"stop-{self.token}" in line:
                return
            if command == "ECHO" and f"start-{self.token}" in line:
                self._started.set()
            elif self._started.is_set():
                (self.in_scripts if client == "lua" else self.sent)[command] += 1


@contextmanager
def cost_of(redis_url: str) -> Iterator[Cost]:
    """The statements, transactions (of this thread's connection) and Redis commands (of every
    client) of the block."""
    cost = Cost()
    with RedisTally(redis_url) as tally, CaptureQueriesContext(connection) as queries:
        yield cost
    sql_tally(cost, queries.captured_queries)
    cost.redis_kinds = tally.sent
    cost.redis_commands = sum(tally.sent.values())
    cost.redis_in_scripts = sum(tally.in_scripts.values())
