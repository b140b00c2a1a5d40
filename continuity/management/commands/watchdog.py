from __future__ import annotations

import logging
import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import InterfaceError, OperationalError, close_old_connections, connection

from continuity.delivery import (
    crash_burst_check,
    heartbeat_ttl,
    history_record,
    retention_prune,
    tool_servers_check,
    watchdog_tick,
    workers_check,
)

logger = logging.getLogger("continuity.watchdog")


class Command(BaseCommand):
    help = "Reap crashed attempts, re-enqueue stalled conversations and prune old working state."

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval",
            type=float,
            default=None,
            help="Seconds between sweeps (default: CONTINUITY_WATCHDOG_SECONDS).",
        )
        parser.add_argument("--once", action="store_true", help="Run one sweep and exit.")

    def handle(self, *args, interval: float | None, once: bool, **options):
        interval = settings.CONTINUITY_WATCHDOG_SECONDS if interval is None else interval
        if interval <= 0:
            raise CommandError("--interval must be positive.")
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        logger.info("Watchdog started (every %ss)", interval)
        pruned_at = recorded_at = -float("inf")
        database_lost_at = -float("inf")
        while not stop.is_set():
            # After losing the database, attempts could not refresh their rows either: wait a
            # full heartbeat TTL for them to beat again before judging anyone dead.
            settled = time.monotonic() - database_lost_at >= heartbeat_ttl().total_seconds()
            if not guarded(watchdog_tick, reap=settled):
                database_lost_at = time.monotonic()
            guarded(tool_servers_check)  # asks each server marked down again, now and then
            guarded(workers_check)  # no live worker while messages wait: an alert, and pages
            guarded(crash_burst_check)  # many crashes across conversations: one alert
            if time.monotonic() - recorded_at >= settings.CONTINUITY_HISTORY_EVERY_SECONDS:
                guarded(history_record)
                recorded_at = time.monotonic()
            if time.monotonic() - pruned_at >= settings.CONTINUITY_PRUNE_EVERY_SECONDS:
                guarded(retention_prune)
                pruned_at = time.monotonic()
            if once:
                break
            stop.wait(interval)
        logger.info("Watchdog stopped")


def guarded(job, **kwargs) -> bool:
    """Run a job; False if it lost the database. The watchdog must outlive outages of what it
    watches: it logs, and tries again next time."""
    close_old_connections()
    try:
        job(**kwargs)
    except (OperationalError, InterfaceError):
        logger.warning("Watchdog job %s: database unavailable", job.__name__, exc_info=True)
        connection.close()
        return False
    except Exception:
        logger.exception("Watchdog job %s failed", job.__name__)
    return True
