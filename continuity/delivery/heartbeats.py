"""Liveness: a running attempt and a worker node each refresh a Redis key (TTL = 2x the interval)
and mirror it on their database row. The row survives a Redis restart; the key answers fast."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from datetime import timedelta

import redis
from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
)
from django.db.models import ExpressionWrapper, QuerySet
from django.db.models.functions import Now

from ..database.clock import db_now_plus
from ..models import Run, Worker
from .redis_connection import redis_client

logger = logging.getLogger(__name__)


def heartbeat_ttl() -> timedelta:
    return timedelta(seconds=2 * settings.CONTINUITY_HEARTBEAT_SECONDS)


def run_key(run_id: int) -> str:
    return f"continuity:run:{run_id}:alive"


def outage_key(run_id: int) -> str:
    return f"continuity:run:{run_id}:outage"


# A day: the watchdog reaps a run within seconds of the database's return.
OUTAGE_NOTE_SECONDS = 86_400


def outage_note(run_id: int) -> None:
    """The attempt lost the database and could not record its end (or whether its last commit
    took: then `run_id` is the attempt that commit may have begun): when the watchdog reaps
    it, it is an interruption, not a crash. Redis, since the database is what is away."""
    try:
        redis_client().set(outage_key(run_id), "1", ex=OUTAGE_NOTE_SECONDS)
    except redis.RedisError:
        logger.warning("Attempt %s lost the database, and Redis did not hear of it", run_id)


def outages_noted(run_ids: list[int]) -> set[int]:
    """The runs among these that lost the database (see `outage_note`)."""
    if not run_ids:
        return set()
    try:
        noted = redis_client().mget([outage_key(pk) for pk in run_ids])
    except redis.RedisError:
        return set()
    return {pk for pk, value in zip(run_ids, noted, strict=True) if value is not None}


def worker_key(name: str) -> str:
    return f"continuity:worker:{name}:alive"


def key_set(client: redis.Redis, key: str):
    """Write a heartbeat key, alive for the heartbeat TTL (on a client or a pipeline)."""
    return client.set(key, "1", px=int(heartbeat_ttl().total_seconds() * 1000))


def key_refresh(key: str) -> None:
    try:
        key_set(redis_client(), key)
    except redis.RedisError:
        logger.warning("Heartbeat key %s not refreshed: Redis unavailable", key)


def key_delete(key: str) -> None:
    try:
        redis_client().delete(key)
    except redis.RedisError:
        logger.warning("Heartbeat key %s not deleted: Redis unavailable", key)


def keys_alive(keys: list[str]) -> set[str]:
    """The keys that still exist; none when Redis cannot answer (the rows decide then)."""
    if not keys:
        return set()
    try:
        values = redis_client().mget(keys)
    except redis.RedisError:
        return set()
    return {key for key, value in zip(keys, values, strict=True) if value is not None}


def stale_before() -> ExpressionWrapper:
    """Heartbeats older than this are stale. Written and compared on the database's clock, so
    workers and watchdogs on hosts with skewed clocks agree."""
    return db_now_plus(-heartbeat_ttl())


def stale_run_ids(runs: QuerySet[Run]) -> list[int]:
    """The running runs among `runs` whose heartbeat is stale on their row and in Redis."""
    candidates = list(
        runs.filter(state=Run.State.RUNNING, heartbeat_at__lt=stale_before()).values_list(
            "pk", flat=True
        )
    )
    alive = keys_alive([run_key(pk) for pk in candidates])
    return [pk for pk in candidates if run_key(pk) not in alive]


class Beat:
    """Calls `beat()` every heartbeat interval on a thread; stops when it returns False."""

    def __init__(self, name: str) -> None:
        self.stopped = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def beat(self) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        try:
            while not self._done.wait(settings.CONTINUITY_HEARTBEAT_SECONDS):
                if not self.beat():
                    self.stopped.set()
                    return
        except Exception:
            # A heartbeat that died silently would let its attempt run on unfenced until reaped.
            logger.exception("Heartbeat %s failed; stopping its work", self._thread.name)
            self.stopped.set()
        finally:
            connection.close()


class RunHeartbeat:
    """Keeps a run alive while it works; sets `stopped` once another party has ended the run
    (watchdog, planned shutdown): the attempt is fenced off and must stop."""

    def __init__(self, run_id: int, *, key_written: bool = False) -> None:
        """`key_written`: the caller has just written the run's Redis key."""
        self.run_id = run_id
        self.key_written = key_written
        self.stopped = threading.Event()
        self.completed = False  # set by the attempt once its reply is committed

    def __enter__(self) -> RunHeartbeat:
        if not self.key_written:
            key_refresh(run_key(self.run_id))
        run_beats().add(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        run_beats().remove(self)
        if exc_type is not None and issubclass(exc_type, (OperationalError, InterfaceError)):
            # The database went away before the attempt's end was recorded (a withdrawal that
            # could not commit): when the watchdog reaps it, it is an interruption.
            outage_note(self.run_id)
        if not self.completed:
            # An attempt whose end may be unrecorded is reaped as soon as its row goes stale.
            # A completed run's key is read by no one: it expires within two heartbeats, and
            # deleting it cost a Redis round trip per message.
            key_delete(run_key(self.run_id))

    def beat(self) -> bool:
        """The row's heartbeat, and whether the run is still this attempt's. The Redis key is
        refreshed by a thread of its own (`RunBeats`), whatever this write waits for."""
        close_old_connections()  # reconnect after a database restart instead of failing forever
        try:
            owned = Run.objects.filter(pk=self.run_id, state=Run.State.RUNNING).update(
                heartbeat_at=Now()
            )
        except (DatabaseError, InterfaceError):
            logger.warning("Attempt %s heartbeat not written", self.run_id, exc_info=True)
            return True
        if not owned:
            logger.warning("Attempt %s was ended elsewhere; stopping this attempt", self.run_id)
            key_delete(run_key(self.run_id))
            return False
        return True


class RunBeats:
    """The heartbeats of the runs this process works on, from one thread that lives as long
    as the process: a thread per attempt cost 0.4 ms to start and join, a twentieth of a
    message. Each run beats one interval after it was added, then every interval.

    Adding a run wakes the thread only when the run is due before the thread would wake
    anyway: waking it for every attempt (to learn that nothing is due for an interval) cost a
    thread switch per message.

    The runs' Redis keys, which say "this process is alive", are refreshed by a second thread,
    every interval, whatever the database does: a row write that waits on a lock, a black-holed
    connection or an outage must not let a live attempt's key lapse (with the key gone and the
    row stale, the watchdog would reap it as crashed)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[RunHeartbeat, float] = {}
        self._beating: RunHeartbeat | None = None
        self._wakes_at = 0.0  # while the thread waits: when it wakes by itself
        self.thread = threading.Thread(target=self._loop, name="heartbeat-runs", daemon=True)
        self.thread.start()
        self.keys_thread = threading.Thread(
            target=self._keys_loop, name="heartbeat-keys", daemon=True
        )
        self.keys_thread.start()

    def _keys_loop(self) -> None:
        while True:
            time.sleep(settings.CONTINUITY_HEARTBEAT_SECONDS)
            with self._changed:
                runs = {heartbeat.run_id for heartbeat in self._due}
            if not runs:
                continue
            try:
                with redis_client().pipeline(transaction=False) as pipeline:
                    for run_id in runs:
                        key_set(pipeline, run_key(run_id))
                    pipeline.execute()
            except redis.RedisError:
                logger.warning("Heartbeat keys of runs %s not refreshed", sorted(runs))

    def add(self, heartbeat: RunHeartbeat) -> None:
        with self._changed:
            due = time.monotonic() + settings.CONTINUITY_HEARTBEAT_SECONDS
            self._due[heartbeat] = due
            if due < self._wakes_at:
                self._changed.notify_all()

    def remove(self, heartbeat: RunHeartbeat) -> None:
        """Once this returns, the run is not beating, and will not again."""
        with self._changed:
            self._due.pop(heartbeat, None)
            self._changed.wait_for(lambda: self._beating is not heartbeat)

    def _loop(self) -> None:
        while True:
            heartbeat = self._next_due()
            if heartbeat is None:
                # Idle: the thread's database connection is not kept open between attempts.
                with contextlib.suppress(DatabaseError, InterfaceError):
                    connection.close()
                with self._changed:
                    if not self._due:
                        self._wait(settings.CONTINUITY_HEARTBEAT_SECONDS)
                continue
            alive = False
            try:
                alive = heartbeat.beat()
            except Exception:
                # A heartbeat that died silently would let its attempt run on unfenced.
                logger.exception("Heartbeat of attempt %s failed; stopping it", heartbeat.run_id)
            finally:
                with self._changed:
                    self._beating = None
                    if not alive:
                        heartbeat.stopped.set()
                        self._due.pop(heartbeat, None)
                    elif heartbeat in self._due:
                        interval = settings.CONTINUITY_HEARTBEAT_SECONDS
                        self._due[heartbeat] = time.monotonic() + interval
                    self._changed.notify_all()

    def _next_due(self) -> RunHeartbeat | None:
        """Once its beat is due, the run that is due first, marked as beating; None when no
        run is left to beat."""
        with self._changed:
            while self._due:
                heartbeat, due = min(self._due.items(), key=lambda item: item[1])
                wait = due - time.monotonic()
                if wait <= 0:
                    self._beating = heartbeat
                    return heartbeat
                self._wait(wait)
            return None

    def _wait(self, seconds: float) -> None:
        """With the condition held: wait until notified, or `seconds` passed."""
        self._wakes_at = time.monotonic() + seconds
        try:
            self._changed.wait(seconds)
        finally:
            self._wakes_at = 0.0


_run_beats_lock = threading.Lock()
_run_beats: tuple[int, RunBeats] | None = None


def run_beats() -> RunBeats:
    """This process's run heartbeats. Keyed by pid: a prefork child inherits the parent's
    object but not its thread (nor does anyone get a thread that died)."""
    global _run_beats
    with _run_beats_lock:
        stale = _run_beats is None or _run_beats[0] != os.getpid()
        if stale or not _run_beats[1].thread.is_alive():
            _run_beats = (os.getpid(), RunBeats())
        return _run_beats[1]


class WorkerHeartbeat(Beat):
    def __init__(self, name: str) -> None:
        super().__init__(f"heartbeat-worker-{name}")
        self.name = name

    def beat(self) -> bool:
        close_old_connections()
        try:
            Worker.objects.filter(name=self.name).update(last_seen_at=Now())
        except (DatabaseError, InterfaceError):
            logger.warning("Worker %s heartbeat not written", self.name, exc_info=True)
        key_refresh(worker_key(self.name))
        return True
