from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError, connection

from continuity.delivery.inbox import message_accept
from continuity.models import Conversation, Message
from continuity.ops.chaos import Chaos, Restarts, chaos_audit, postgres_restart, wait_until
from continuity.ops.processes import ChildProcess, watchdog_argv
from continuity.ops.redis_server import RedisServer, redis_use

RECOVERY_CLOCKS = {
    "CONTINUITY_HEARTBEAT_SECONDS": "1",
    "CONTINUITY_CRASH_BACKOFF_SECONDS": "1,2,4,8",
    "CONTINUITY_REQUEUE_AFTER_SECONDS": "5",
    "CONTINUITY_WATCHDOG_SECONDS": "0.5",
}


class Command(BaseCommand):
    help = (
        "Send messages through real workers while SIGKILLing them at random (and optionally "
        "restarting Redis), then print a JSON audit; exit 1 if anything was lost, duplicated "
        "or reordered."
    )

    def add_arguments(self, parser):
        add = parser.add_argument
        add("--messages", type=int, default=1000, help="Messages to send (default 1000).")
        add("--conversations", type=int, default=50, help="Conversations to spread them over.")
        add("--workers", type=int, default=2, help="Celery workers to run (default 2).")
        add("--concurrency", type=int, default=2, help="Processes per worker (default 2).")
        add(
            "--kill-every",
            type=float,
            default=2.0,
            help="Mean seconds between SIGKILLs of worker processes (0: no kills).",
        )
        add(
            "--restart-redis-every",
            type=float,
            default=0.0,
            help="Restart the private Redis this often, in seconds (default 0: never).",
        )
        add(
            "--restart-postgres-every",
            type=float,
            default=0.0,
            help="Restart the local PostgreSQL cluster crash-like (pg_ctlcluster restart -m "
            "immediate; needs root) this often, in seconds (default 0: never).",
        )
        add("--send-rate", type=float, default=50.0, help="Messages sent per second.")
        add("--token-delay", type=float, default=0.005, help="Built-in brain delay per word.")
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
        add("--keep", action="store_true", help="Keep the run's user and conversations.")

    def handle(self, *args, **options):
        if options["messages"] < 1 or options["conversations"] < 1 or options["workers"] < 1:
            raise CommandError("--messages, --conversations and --workers must be positive.")
        rng = random.Random(options["seed"])
        log_dir = Path(tempfile.mkdtemp(prefix="continuity-chaos-"))
        redis_server = RedisServer().start()
        redis_use(redis_server.url)
        env = self.child_env(redis_server.url, options)
        watchdog = ChildProcess(watchdog_argv(), env=env, log_path=log_dir / "watchdog.log")
        chaos = Chaos(
            env=env,
            log_dir=log_dir,
            workers=options["workers"],
            concurrency=options["concurrency"],
            kill_every=options["kill_every"],
            rng=rng,
        )
        owner = get_user_model().objects.create_user(f"chaos-{uuid.uuid4().hex[:8]}")
        conversations = [
            Conversation.objects.create(owner=owner, title=f"Chaos {i}")
            for i in range(options["conversations"])
        ]
        ids = [c.pk for c in conversations]
        redis_restarts = Restarts(redis_server.restart, options["restart_redis_every"])
        postgres_restarts = Restarts(postgres_restart, options["restart_postgres_every"])
        started = time.monotonic()
        try:
            watchdog.start()
            chaos.start()
            redis_restarts.start()
            postgres_restarts.start()
            sent = send(conversations, options["messages"], options["send_rate"], rng)
            finished = wait_until(
                lambda: not pending(ids), timeout=options["timeout"] - (time.monotonic() - started)
            )
        finally:
            postgres_restarts.stop()
            redis_restarts.stop()
            chaos.stop()
            watchdog.stop()
        connection.close()  # it may predate the last database restart
        audit = chaos_audit(conversation_ids=ids, sent=sent)
        audit.update(
            settings={key: env[key] for key in sorted(CHAOS_SETTINGS)},
            kills=chaos.kills,
            redis_restarts=redis_restarts.count,
            postgres_restarts=postgres_restarts.count,
            seconds=round(time.monotonic() - started, 1),
            finished_before_timeout=finished,
            logs=str(log_dir),
        )
        if not options["keep"]:
            owner.delete()
        redis_server.stop()
        self.stdout.write(json.dumps(audit, indent=2))
        if audit["lost"] or audit["duplicates"] or audit["out_of_order"]:
            sys.exit(1)

    def child_env(self, redis_url: str, options) -> dict[str, str]:
        max_attempts = options["max_attempts"] or settings.CONTINUITY_MAX_ATTEMPTS
        pause_after = options["pause_after_crashes"] or settings.CONTINUITY_PAUSE_AFTER_CRASHES
        return {
            **os.environ,
            **RECOVERY_CLOCKS,
            "DJANGO_SETTINGS_MODULE": os.environ.get(
                "DJANGO_SETTINGS_MODULE", "continuity.settings"
            ),
            "REDIS_URL": redis_url,
            "PYTHONUNBUFFERED": "1",
            "CONTINUITY_BUILTIN_TOKEN_DELAY": str(options["token_delay"]),
            "CONTINUITY_MAX_ATTEMPTS": str(max_attempts),
            "CONTINUITY_PAUSE_AFTER_CRASHES": str(pause_after),
        }


CHAOS_SETTINGS = (
    *RECOVERY_CLOCKS,
    "CONTINUITY_BUILTIN_TOKEN_DELAY",
    "CONTINUITY_MAX_ATTEMPTS",
    "CONTINUITY_PAUSE_AFTER_CRASHES",
)


def send(conversations, count: int, rate: float, rng: random.Random) -> int:
    for number in range(count):
        conversation = rng.choice(conversations)
        text = f"Chaos message {number}: remember that item {number} matters"
        client_id = uuid.uuid4()
        accept = partial(message_accept, conversation=conversation, text=text, client_id=client_id)
        # As a browser does on a 503: the same client id again until the database takes it.
        while not database_answers(accept):
            time.sleep(0.2)
        time.sleep(1 / rate)
    return count


def pending(conversation_ids: list[int]) -> bool:
    """Whether messages still wait for an answer; those of paused conversations wait for staff,
    and the audit reports them apart."""
    return not database_answers(
        lambda: (
            not Message.objects.filter(
                conversation_id__in=conversation_ids,
                conversation__state=Conversation.State.ACTIVE,
                state__in=Message.PENDING_STATES,
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
