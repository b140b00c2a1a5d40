from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError, connection

from continuity.models import Conversation, Message
from continuity.ops.web import web_argv
from devtools.chaos import (
    CHAOS_TOOL_CALLS,
    Browsers,
    Chaos,
    Deciding,
    ModelOutage,
    Scheduled,
    chaos_audit,
    postgres_restart,
    spread,
    tools_audit,
    wait_until,
)
from devtools.fake_model import FakeOpenAI
from devtools.processes import ChildProcess, McpServerChild, watchdog_argv
from devtools.redis_server import RedisServer, free_port, redis_use

# `--fast-clocks`: a shorter crash backoff and stall re-send than the defaults, for the suite's
# smoke run; a run that judges the product keeps the defaults.
FAST_CLOCKS = {
    "CONTINUITY_CRASH_BACKOFF_SECONDS": "1,2,4,8",
    "CONTINUITY_REQUEUE_AFTER_SECONDS": "5",
    "CONTINUITY_WATCHDOG_SECONDS": "0.5",
}


class Command(BaseCommand):
    help = (
        "Send messages through a real web server to real workers while SIGKILLing them at "
        "random (and optionally restarting Redis and PostgreSQL, and taking the model server "
        "away), then print a JSON audit; exit 1 if anything was lost, duplicated or reordered."
    )

    def add_arguments(self, parser):
        add = parser.add_argument
        add("--messages", type=int, default=1000, help="Messages to send (default 1000).")
        add("--conversations", type=int, default=50, help="Conversations to spread them over.")
        add("--workers", type=int, default=2, help="Celery workers to run (default 2).")
        add("--concurrency", type=int, default=2, help="Processes per worker (default 2).")
        add(
            "--kill-every",
            type=seconds_range,
            default=(3.0, 5.0),
            help="Seconds between SIGKILLs of worker processes, drawn from MIN-MAX "
            "(default 3-5; 0: no kills).",
        )
        add(
            "--redis-restarts",
            type=int,
            default=0,
            help="Restarts of the private Redis, spread over the sending (default 0).",
        )
        add(
            "--postgres-restarts",
            type=int,
            default=0,
            help="Crash-like restarts of the local PostgreSQL cluster (pg_ctlcluster restart -m "
            "immediate; needs root), spread over the sending (default 0).",
        )
        add(
            "--model-outage",
            type=float,
            default=0.0,
            help="Answer with the `openai` brain from a fake OpenAI-compatible server that this "
            "command runs, and stop that server for this many seconds halfway through the "
            "sending (default 0: the built-in brain, no model server).",
        )
        add(
            "--tools",
            action="store_true",
            help="Replies call tools: the `openai` brain, from the fake server, asks in each "
            "reply's first round for the test MCP server's ledger_append (neither read-only nor "
            "idempotent), set_value (idempotent) and lookup (read-only), which this command "
            "runs. Calls left in doubt are decided as a person would, Run again or Skip at "
            "random; the report counts the ledger's runs per key.",
        )
        add("--send-rate", type=float, default=50.0, help="Messages sent per second.")
        add(
            "--token-delay",
            type=float,
            default=0.005,
            help="Seconds per word of a reply (the built-in brain's or the model server's).",
        )
        add(
            "--fast-clocks",
            action="store_true",
            help="Shorter crash backoff and stall re-send than the defaults (the suite's run).",
        )
        add(
            "--max-attempts",
            type=int,
            default=None,
            help="CONTINUITY_MAX_ATTEMPTS for the run (default: the configured one).",
        )
        add(
            "--pause-after-crashes",
            type=int,
            default=None,
            help="CONTINUITY_PAUSE_AFTER_CRASHES for the run (default: the configured one).",
        )
        add("--timeout", type=float, default=1800.0, help="Give up waiting after this long.")
        add("--seed", type=int, default=None, help="Random seed, for a repeatable run.")
        add("--keep", action="store_true", help="Keep the run's users and conversations.")

    def handle(self, *args, **options):
        if options["messages"] < 1 or options["conversations"] < 1 or options["workers"] < 1:
            raise CommandError("--messages, --conversations and --workers must be positive.")
        rng = random.Random(options["seed"])
        log_dir = Path(tempfile.mkdtemp(prefix="continuity-chaos-"))
        redis_server = RedisServer().start()
        redis_use(redis_server.url)
        model = tool_server = None
        if options["model_outage"] > 0 or options["tools"]:
            calls = CHAOS_TOOL_CALLS if options["tools"] else ()
            model = FakeOpenAI(delay=options["token_delay"], first_round_calls=calls).start()
        if options["tools"]:
            tool_server = McpServerChild(
                port=free_port(),
                ledger=log_dir / "ledger.jsonl",
                env=dict(os.environ),
                log_path=log_dir / "mcp-server.log",
            )
        env = self.child_env(redis_server.url, options, model, tool_server)
        port = free_port()
        web = ChildProcess(
            web_argv(host="127.0.0.1", port=port), env=env, log_path=log_dir / "web.log"
        )
        base_url = f"http://127.0.0.1:{port}"
        watchdog = ChildProcess(watchdog_argv(), env=env, log_path=log_dir / "watchdog.log")
        chaos = Chaos(
            env=env,
            log_dir=log_dir,
            workers=options["workers"],
            concurrency=options["concurrency"],
            kill_every=options["kill_every"],
            rng=rng,
        )
        # One owner each, as people are: the per-person send rate limits a person, not a run.
        owners = [
            get_user_model().objects.create_user(f"chaos-{uuid.uuid4().hex[:12]}")
            for _ in range(options["conversations"])
        ]
        conversations = [
            Conversation.objects.create(owner=owner, title=f"Chaos {i}")
            for i, owner in enumerate(owners)
        ]
        ids = [c.pk for c in conversations]
        sending = options["messages"] / options["send_rate"]
        redis_restarts = Scheduled(redis_server.restart, spread(options["redis_restarts"], sending))
        postgres_restarts = Scheduled(
            postgres_restart, spread(options["postgres_restarts"], sending)
        )
        outage = Scheduled(
            ModelOutage(model, options["model_outage"]) if options["model_outage"] > 0 else None,
            [sending / 2] if options["model_outage"] > 0 else [],
        )
        browsers = Browsers(base_url)
        deciding = Deciding(browsers, ids, rng)
        started = time.monotonic()
        try:
            if tool_server is not None:
                tool_server.start()
                wait_until(tool_server.answers, timeout=60, every=0.2)
            web.start()
            watchdog.start()
            wait_until(lambda: web_answers(base_url), timeout=60, every=0.2)
            for conversation in conversations:
                browsers.sign_in(conversation)
            chaos.start()
            for scheduled in (redis_restarts, postgres_restarts, outage):
                scheduled.start()
            if tool_server is not None:
                deciding.start()
            sent = send(browsers, ids, options["messages"], options["send_rate"], rng)
            finished = wait_until(
                lambda: not still_waiting(ids),
                timeout=options["timeout"] - (time.monotonic() - started),
            )
        finally:
            for scheduled in (outage, postgres_restarts, redis_restarts):
                scheduled.stop()
            deciding.stop()
            chaos.stop()
            watchdog.stop()
            web.stop()
            if tool_server is not None:
                tool_server.stop()
        connection.close()  # it may predate the last database restart
        audit = chaos_audit(conversation_ids=ids, sent=sent)
        audit.update(
            settings={key: env[key] for key in CHAOS_SETTINGS if key in env},
            kills=chaos.kills,
            redis_restarts=redis_restarts.count,
            postgres_restarts=postgres_restarts.count,
            model_outages=outage.count,
            http_statuses=dict(sorted(browsers.statuses.items())),
            http_5xx=browsers.server_errors(),
            **(
                {
                    "tools": tools_audit(
                        ids,
                        tool_server.ledger,
                        run_again=deciding.run_again,
                        decided=deciding.decided,
                    )
                }
                if tool_server
                else {}
            ),
            seconds=round(time.monotonic() - started, 1),
            finished_before_timeout=finished,
            logs=str(log_dir),
        )
        if not options["keep"]:
            get_user_model().objects.filter(pk__in=[owner.pk for owner in owners]).delete()
        if model is not None:
            model.stop()
        redis_server.stop()
        self.stdout.write(json.dumps(audit, indent=2))
        tools_broken = audit.get("tools", {}).get("keys_run_more_than_chosen", 0)
        if audit["lost"] or audit["duplicates"] or audit["out_of_order"] or tools_broken:
            sys.exit(1)

    def child_env(
        self, redis_url: str, options, model: FakeOpenAI | None, tool_server: McpServerChild | None
    ) -> dict[str, str]:
        max_attempts = options["max_attempts"] or settings.CONTINUITY_MAX_ATTEMPTS
        pause_after = options["pause_after_crashes"] or settings.CONTINUITY_PAUSE_AFTER_CRASHES
        env = {
            **os.environ,
            **(FAST_CLOCKS if options["fast_clocks"] else {}),
            "DJANGO_SETTINGS_MODULE": os.environ.get(
                "DJANGO_SETTINGS_MODULE", "continuity.settings"
            ),
            "REDIS_URL": redis_url,
            "PYTHONUNBUFFERED": "1",
            "CONTINUITY_BUILTIN_TOKEN_DELAY": str(options["token_delay"]),
            "CONTINUITY_MAX_ATTEMPTS": str(max_attempts),
            "CONTINUITY_PAUSE_AFTER_CRASHES": str(pause_after),
        }
        if model is not None:
            env |= {
                "CONTINUITY_BRAIN": "openai",
                "CONTINUITY_OPENAI_BASE_URL": model.url,
                "CONTINUITY_OPENAI_API_KEY": model.api_key,
                "CONTINUITY_OPENAI_MODEL": model.model,
            }
        if tool_server is not None:
            # Its ledger tool (destructive by MCP's defaults) runs without asking: the run
            # measures what crashes do to calls, and nobody is there to answer.
            never_asks = {"ledger_append": {"approval": "never"}}
            env["CONTINUITY_MCP_SERVERS"] = json.dumps(
                [{"name": "chaos", "url": tool_server.url, "policies": never_asks}]
            )
        return env


SENDERS = 4  # browsers sending at once

CHAOS_SETTINGS = (
    *FAST_CLOCKS,
    "CONTINUITY_BUILTIN_TOKEN_DELAY",
    "CONTINUITY_MAX_ATTEMPTS",
    "CONTINUITY_PAUSE_AFTER_CRASHES",
    "CONTINUITY_BRAIN",
)


def seconds_range(value: str) -> tuple[float, float]:
    """ "3-5" → (3.0, 5.0); "4" → (4.0, 4.0)."""
    low, _, high = value.partition("-")
    try:
        bounds = (float(low), float(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not seconds or MIN-MAX seconds: {value!r}") from None
    if bounds[0] < 0 or bounds[1] < bounds[0]:
        raise argparse.ArgumentTypeError(f"not a range of seconds: {value!r}")
    return bounds


def web_answers(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/accounts/login/", timeout=5):
            return True
    except OSError:
        return False


def send(browsers: Browsers, conversation_ids: list[int], count: int, rate: float, rng) -> int:
    """`count` messages at about `rate` a second from SENDERS browsers at once, each with its
    own share of the conversations: a conversation's messages are sent one after the other,
    as one person's are."""
    numbers = iter(range(count))
    lock = threading.Lock()
    seeds = [rng.random() for _ in range(SENDERS)]

    def sender(index: int) -> None:
        own = conversation_ids[index::SENDERS] or conversation_ids
        pick = random.Random(seeds[index])
        while True:
            with lock:
                number = next(numbers, None)
            if number is None:
                return
            text = f"Chaos message {number}: remember that item {number} matters"
            browsers.send(pick.choice(own), text)
            time.sleep(SENDERS / rate)

    threads = [threading.Thread(target=sender, args=(index,)) for index in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count


def still_waiting(conversation_ids: list[int]) -> bool:
    """Whether messages still wait for an answer; those of paused conversations wait for staff,
    and the audit reports them apart."""
    return not database_answers(
        lambda: (
            not Message.objects.filter(
                conversation_id__in=conversation_ids,
                # One waiting for its owner's decision on a tool call is decided by `Deciding`.
                conversation__state__in=[
                    Conversation.State.ACTIVE,
                    Conversation.State.DECIDING,
                ],
                state__in=Message.WAITING_STATES,
            ).exists()
        )
    )


def database_answers(query) -> bool:
    """Run `query`; False if the database was away (during a restart) or the query said no."""
    try:
        return bool(query())
    except (OperationalError, InterfaceError):
        connection.close()
        return False
