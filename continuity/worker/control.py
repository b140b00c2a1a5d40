"""Staff's controls over worker nodes, through Celery's remote control as Flower uses it: read
each pool's size, grow, shrink or restart it, and shut a worker down gracefully.

A graceful shutdown takes the path of a SIGTERM (`signals.on_worker_shutting_down`):
no attempt begins on the node any more, the running ones are handed over with a "planned
shutdown" handoff, and the worker exits once its pool is idle. Celery's own `shutdown` command
skips that handover, so the worker registers `continuity_shutdown` below.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass

from celery import signals
from celery.platforms import EX_OK
from celery.worker import state as worker_state
from celery.worker.control import control_command, nok, ok, pool_shrink
from kombu.exceptions import OperationalError

from continuity.celery import app as celery_app

from ..delivery.audit import staff_action_record
from ..models import StaffAction, Worker

logger = logging.getLogger(__name__)

# How long the console waits for workers to answer: a live worker answers in milliseconds,
# and a page must not hang on one that died without saying goodbye.
INSPECT_TIMEOUT_SECONDS = 1.0
# How long a command may take to answer; a shutdown answers once its attempts are handed over,
# which takes at most SHUTDOWN_HANDOFF_SECONDS.
COMMAND_TIMEOUT_SECONDS = 5.0
SHUTDOWN_TIMEOUT_SECONDS = 20.0


class BrokerUnavailable(Exception):
    """The broker did not take the request: no worker can be asked anything."""


class CommandRefused(Exception):
    """The worker answered with an error, or not at all."""


@dataclass(frozen=True)
class Pool:
    processes: int
    busy: int


@dataclass(frozen=True)
class Command:
    kind: str  # a StaffAction.Kind
    name: str  # the remote control command
    arguments: dict
    done: str  # what staff are told once the worker took it
    timeout: float = COMMAND_TIMEOUT_SECONDS
    resizes: int = 0  # how the pool's size changes once the command took effect


# A pool grows or shrinks a moment after its worker took the command (a process is forked, or
# ends once idle): the answer waits this long for the new size, so that the page it leads to
# shows it rather than the size before.
RESIZE_WAIT_SECONDS = 5.0


COMMANDS = {
    "shutdown": Command(
        StaffAction.Kind.WORKER_SHUTDOWN,
        "continuity_shutdown",
        {},
        "shuts down: its running attempts are handed over, and it exits once its pool is idle",
        timeout=SHUTDOWN_TIMEOUT_SECONDS,
    ),
    "grow": Command(
        StaffAction.Kind.POOL_GROW, "pool_grow", {"n": 1}, "grew its pool by one", resizes=1
    ),
    "shrink": Command(
        StaffAction.Kind.POOL_SHRINK,
        "continuity_pool_shrink",
        {},
        "shrank its pool by one",
        resizes=-1,
    ),
    "restart": Command(
        StaffAction.Kind.POOL_RESTART,
        "pool_restart",
        {},
        "restarts its pool: each process ends after its current attempt and a new one takes "
        "its place",
    ),
}


@contextmanager
def broker_connection():
    """A connection to the broker, made at once or BrokerUnavailable: kombu would otherwise
    retry a broker that is down for as long as the page waits."""
    with celery_app.connection_for_write() as connection:
        try:
            connection.ensure_connection(max_retries=1, timeout=INSPECT_TIMEOUT_SECONDS)
        except (OperationalError, OSError) as error:
            raise BrokerUnavailable(str(error)) from error
        yield connection


def pools_of(names: list[str]) -> dict[str, Pool]:
    """The pool of each named worker that answered; BrokerUnavailable when none can be asked."""
    if not names:
        return {}
    with broker_connection() as connection:
        try:
            stats = inspect(names, connection).stats() or {}
            # Only those that answered: waiting out one that did not costs a second.
            active = (inspect(list(stats), connection).active() or {}) if stats else {}
        except (OperationalError, OSError) as error:
            raise BrokerUnavailable(str(error)) from error
    return {
        name: Pool(
            processes=len(stat.get("pool", {}).get("processes", [])),
            busy=len(active.get(name, [])),
        )
        for name, stat in stats.items()
    }


def inspect(names: list[str], connection):
    return celery_app.control.inspect(
        destination=names, timeout=INSPECT_TIMEOUT_SECONDS, connection=connection
    )


def worker_command(*, worker: Worker, action: str, by, reason: str) -> str:
    """Send `action` (a COMMANDS key) to `worker`, and record who asked and why once it took
    it. What the worker said, for staff."""
    command = COMMANDS[action]
    before = pools_of([worker.name]).get(worker.name) if command.resizes else None
    with broker_connection() as connection:
        try:
            replies = celery_app.control.broadcast(
                command.name,
                arguments=command.arguments,
                destination=[worker.name],
                reply=True,
                limit=1,
                timeout=command.timeout,
                connection=connection,
            )
        except (OperationalError, OSError) as error:
            raise BrokerUnavailable(str(error)) from error
    answer = next((reply[worker.name] for reply in replies or [] if worker.name in reply), None)
    if answer is None:
        raise CommandRefused(
            f"It did not answer within {command.timeout:g} s: it may be stopped, or "
            "busy beyond reach. Nothing was recorded."
        )
    if "error" in answer:
        raise CommandRefused(f"It refused: {answer['error']}")
    staff_action_record(
        kind=command.kind,
        by=by,
        reason=reason,
        worker=worker,
        details={"worker": worker.name, "answer": answer.get("ok", "")},
    )
    logger.info("Worker %s: %s by %s (%s)", worker.name, command.name, by, reason)
    if before is None:
        return f"Worker {worker.name} {command.done}."
    return f"Worker {worker.name} {command.done}: {pool_resized(worker.name, before, command)}."


def pool_resized(name: str, before: Pool, command: Command) -> str:
    """The pool's size once the command took effect, waited for RESIZE_WAIT_SECONDS at most."""
    wanted = before.processes + command.resizes
    deadline = time.monotonic() + RESIZE_WAIT_SECONDS
    now = before
    while time.monotonic() < deadline:
        try:
            now = pools_of([name]).get(name) or now
        except BrokerUnavailable:
            break
        if now.processes == wanted:
            return f"it has {processes(wanted)} now"
        time.sleep(0.2)
    return (
        f"it had {processes(now.processes)} a moment ago, and will have {wanted} once the "
        "change is applied (the table shows the size it reports)"
    )


def processes(count: int) -> str:
    return f"{count} process{'' if count == 1 else 'es'}"


SHRINK_REFUSED = (
    "its pool has one process: shrinking it would leave no process to answer. Shut the worker "
    "down instead."
)


@control_command()
def continuity_pool_shrink(state, **kwargs):
    """Celery's pool_shrink by one, refused by the worker itself for a pool of one: the
    console's reading of the pool may be stale, or two staff may shrink it at once."""
    if state.consumer.pool.num_processes <= 1:
        return nok(SHRINK_REFUSED)
    return pool_shrink(state, n=1)


@control_command()
def continuity_shutdown(state, **kwargs):
    """A graceful shutdown asked by staff, as a SIGTERM does it (celery.apps.worker's warm
    shutdown handler): the handover first, then the consumer stops."""
    signals.worker_shutting_down.send(
        sender=state.consumer.hostname, sig="remote", how="Warm", exitcode=EX_OK
    )
    worker_state.should_stop = EX_OK
    return ok("shutting down")
