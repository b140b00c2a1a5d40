"""Model servers' health, shared by every worker: a server that fails is given its own backoff,
and after a few failures in a row it is marked unavailable, so its conversations wait instead
of trying (and burning their attempts) until its next try. Kept in Redis, on Redis's clock.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from threading import Event

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, IntegrityError, InterfaceError, transaction

from ..brains import brain_class, brain_load
from ..errors import AttemptStopped
from ..live.events import publish_conversation_changed
from ..models import Alert, Conversation
from .heartbeats import redis_client
from .inbox import conversation_enqueue

logger = logging.getLogger(__name__)
# A day: a server that failed once and was never tried again is forgotten.
STATE_SECONDS = 86_400


def backend_key(backend: str) -> str:
    return f"continuity:backend:{backend}"


@dataclass(frozen=True)
class BackendDown:
    failures: int  # in a row
    wait: float  # seconds until its next try
    reason: str

    @property
    def unavailable(self) -> bool:
        return self.failures >= settings.CONTINUITY_BACKEND_UNAVAILABLE_AFTER


def backend_delay(failures: int) -> float:
    steps = settings.CONTINUITY_BACKEND_BACKOFF_SECONDS
    return steps[max(1, min(failures, len(steps))) - 1]


def backend_failed(backend: str, *, reason: str, retry_after: float | None) -> BackendDown:
    """Count a failure of the server; its next try waits its backoff, or what it asked for.
    Failures within the current backoff (the other conversations' attempts that were under
    way when the server went, or that began with it) are one failure, not one each: counted
    one by one, 200 conversations failing together took the backoff to its longest at once,
    and they waited minutes after the server was back. Without Redis the failure is not
    shared: this conversation waits the first backoff."""
    try:
        client = redis_client()
        key = backend_key(backend)
        (failures, until), (seconds, micros) = (
            client.pipeline().hmget(key, "failures", "until").time().execute()
        )
        now = seconds + micros / 1e6
        if failures is not None and float(until or 0) > now:
            return BackendDown(
                failures=int(failures),
                wait=max(float(until) - now, retry_after or 0.0),
                reason=reason,
            )
        failures = int(client.hincrby(key, "failures", 1))
        wait = max(backend_delay(failures), retry_after or 0.0)
        client.hset(key, mapping={"until": now + wait, "reason": reason})
        client.expire(key, STATE_SECONDS)
    except redis.RedisError:
        logger.warning("Failure of model server %s not shared: Redis unavailable", backend)
        return BackendDown(
            failures=1, wait=max(backend_delay(1), retry_after or 0.0), reason=reason
        )
    down = BackendDown(failures=failures, wait=wait, reason=reason)
    if failures == settings.CONTINUITY_BACKEND_UNAVAILABLE_AFTER:
        logger.error("Model server %s unavailable after %s failures: %s", backend, failures, reason)
        try:
            Alert.objects.create(
                kind=Alert.Kind.MODEL_UNAVAILABLE,
                text=f"{reason} It failed {failures} times in a row; its conversations wait "
                "and are answered in order once it is back.",
            )
        except (DatabaseError, InterfaceError):
            logger.exception("Alert for model server %s not stored", backend)
    return down


def backend_answered(backend: str) -> None:
    """The server answered: whatever failed before is over, and the conversations that wait
    for it are answered now, not at their own next try (which the backoff may have put
    minutes away); so are those that found it busy (a slot has just been freed)."""
    waited_for = [Conversation.WaitingFor.MODEL_BUSY]
    try:
        if redis_client().delete(backend_key(backend)):
            logger.info("Model server %s answers again", backend)
            waited_for.append(Conversation.WaitingFor.MODEL)
    except redis.RedisError:
        logger.warning("Model server %s answered; Redis did not hear of it", backend)
    try:
        released = conversations_waiting_release(backend, waited_for)
    except (DatabaseError, InterfaceError):
        logger.exception("Conversations waiting for %s left to their next try", backend)
        return
    if released:
        logger.info("%s conversation(s) waiting for %s go on", released, backend)


def conversations_waiting_release(backend: str, waited_for: list[str]) -> int:
    """End the wait of the conversations whose brain uses `backend` and that wait for it as
    `waited_for` says, and send each a drain; how many."""
    brains = brains_of(backend)
    waiting = Conversation.objects.filter(
        state=Conversation.State.ACTIVE,
        waiting_for__in=waited_for,
        brain__in=brains,
    )
    ids = list(waiting.values_list("pk", flat=True))
    waiting.filter(pk__in=ids).update(retry_at=None, waiting_for=Conversation.WaitingFor.ATTEMPT)
    for conversation_id in ids:
        conversation_enqueue(conversation_id=conversation_id)
        publish_conversation_changed(conversation_id=conversation_id)
    return len(ids)


def brains_of(backend: str) -> list[str]:
    """The names of the brains (as conversations store them) whose model server is `backend`;
    "" stands for the default brain."""
    names = []
    for name in settings.CONTINUITY_BRAINS:
        try:
            if getattr(brain_load(name), "backend", None) == backend:
                names.append(name)
        except Exception:  # a brain that cannot load has no server to wait for
            logger.warning("Brain %s not loaded", name, exc_info=True)
    if settings.CONTINUITY_BRAIN in names:
        names.append("")
    return names


def backend_down(backend: str) -> BackendDown | None:
    """The server's state while it is marked unavailable and its next try has not come; None
    otherwise (or when Redis cannot say: then the attempt finds out for itself)."""
    try:
        client = redis_client()
        failures, until, reason = client.hmget(backend_key(backend), "failures", "until", "reason")
        if failures is None or int(failures) < settings.CONTINUITY_BACKEND_UNAVAILABLE_AFTER:
            return None
        seconds, micros = client.time()
    except redis.RedisError:
        return None
    wait = float(until or 0) - (seconds + micros / 1e6)
    if wait <= 0:
        return None  # its next try has come: this attempt is the probe
    return BackendDown(failures=int(failures), wait=wait, reason=(reason or b"").decode())


@dataclass(frozen=True)
class Learned:
    """What attempts learned of a model from its server's refusals, shared by every process:
    its window (the smallest stated or guessed), and how many of its tokens one estimated token
    is (the most seen). None where nothing was learned."""

    window: int | None
    scale: float | None


def learned_key(model: str) -> str:
    return f"continuity:model:{model}:learned"


# Keep the most cautious of what any process learned: the smaller window, the larger scale.
LEARN = """
local window, scale = tonumber(ARGV[1]), tonumber(ARGV[2])
local known = redis.call('HMGET', KEYS[1], 'window', 'scale')
if window > 0 and (not known[1] or window < tonumber(known[1])) then
  redis.call('HSET', KEYS[1], 'window', ARGV[1])
end
if scale > 0 and (not known[2] or scale > tonumber(known[2])) then
  redis.call('HSET', KEYS[1], 'scale', ARGV[2])
end
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return 1
"""


def model_learn(model: str, *, window: int | None = None, scale: float | None = None) -> None:
    """Share what this process learned of `model` (a key naming the server and the model), so
    that no other process meets the same refusal to learn it again. Kept a day, as a server's
    failures are. Without Redis it stays this process's."""
    try:
        redis_client().eval(
            LEARN, 1, learned_key(model), window or 0, repr(scale or 0.0), STATE_SECONDS
        )
    except redis.RedisError:
        logger.warning("What was learned of model %s not shared: Redis unavailable", model)


def model_learned(model: str) -> Learned | None:
    """What any process learned of `model`; None when Redis cannot say."""
    try:
        window, scale = redis_client().hmget(learned_key(model), "window", "scale")
    except redis.RedisError:
        return None
    return Learned(window=int(window) if window else None, scale=float(scale) if scale else None)


# Take a slot of a backend's semaphore: leases that ran out are dropped first, then a slot is
# taken (or this holder's renewed) if fewer than the limit are held. Redis's clock: the hosts'
# clocks do not matter.
SLOT_TAKE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
  return 1
end
return 0
"""
# Renew a slot's lease only while its holder still has it: a renewal that lands after the
# release (or after the lease ran out and the slot went to another) takes nothing back.
SLOT_RENEW = """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZADD', KEYS[1], 'XX', t + tonumber(ARGV[2]), ARGV[1])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return 1
"""
# A slot's lease, renewed by its holder a few times per lease: a holder that dies frees it
# within this time.
SLOT_LEASE_SECONDS = 15.0
SLOT_POLL_SECONDS = 0.1


def slots_key(backend: str) -> str:
    return f"continuity:backend:{backend}:slots"


@contextmanager
def backend_slot(
    backend: str, *, limit: int, wait: float, stopped: Event | None = None
) -> Iterator[bool]:
    """One of the `limit` requests the model server may serve at once, counted across every
    worker (a semaphore in Redis whose slots are leases): a small local server then queues
    conversations instead of interrupting them. Yields True once held, False when none freed
    within `wait` seconds. No limit (`limit` 0), or no Redis to count in: True at once, as a
    limit must not stop answers. AttemptStopped when `stopped` is set while waiting."""
    if limit <= 0:
        yield True
        return
    client, holder, key = redis_client(), uuid.uuid4().hex, slots_key(backend)
    held = slot_wait(client, key, holder, limit, wait=wait, stopped=stopped)
    if not held:
        yield held is None
        return
    done = Event()

    def renew() -> None:
        while not done.wait(SLOT_LEASE_SECONDS / 3):
            with suppress(redis.RedisError):
                client.eval(SLOT_RENEW, 1, key, holder, SLOT_LEASE_SECONDS)

    renewer = threading.Thread(target=renew, name=f"slot-{backend}", daemon=True)
    renewer.start()
    try:
        yield True
    finally:
        done.set()
        renewer.join(timeout=5)  # no renewal after the release (the script checks too)
        with suppress(redis.RedisError):
            client.zrem(key, holder)


def slot_wait(
    client: redis.Redis, key: str, holder: str, limit: int, *, wait: float, stopped: Event | None
) -> bool | None:
    """Whether a slot was taken within `wait` seconds; None when Redis cannot say."""
    deadline = time.monotonic() + wait
    try:
        while not client.eval(SLOT_TAKE, 1, key, holder, limit, SLOT_LEASE_SECONDS):
            if stopped is not None and stopped.is_set():
                raise AttemptStopped(f"Stopped while waiting for a slot of {key}.")
            if time.monotonic() >= deadline:
                return False
            time.sleep(SLOT_POLL_SECONDS)
    except redis.RedisError:
        logger.warning("No slot count for %s; the request goes ahead", key, exc_info=True)
        return None
    return True


def backends_check() -> None:
    """Ask each model server the brains use whether it has their model (at a worker's start):
    a wrong name is said once, in the log and as an alert on the console, instead of every
    answer failing, or, with llama.cpp, silently coming from whatever model it has loaded."""
    for name in {settings.CONTINUITY_BRAIN, *settings.CONTINUITY_BRAIN_CHOICES}:
        try:
            brain = brain_class(name)
        except ImproperlyConfigured:
            continue  # said where each attempt loads it
        problem = brain.configuration_problem() if hasattr(brain, "configuration_problem") else ""
        if problem:
            backend_misconfigured(problem)


def backend_misconfigured(problem: str) -> None:
    logger.warning(problem)
    try:
        open_alerts = Alert.objects.filter(
            kind=Alert.Kind.MODEL_MISSING, text=problem, acknowledged_at__isnull=True
        )
        if not open_alerts.exists():  # once, until staff acknowledge it
            with transaction.atomic():
                Alert.objects.create(kind=Alert.Kind.MODEL_MISSING, text=problem)
    except IntegrityError:
        pass  # another worker, starting at the same moment, has just stored it
    except (DatabaseError, InterfaceError):
        logger.exception("Alert not stored: %s", problem)
