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
from django.db.models import QuerySet

from ..brains import brain_class, brain_load
from ..errors import AttemptStopped
from ..live.events import publish_conversation_changed
from ..models import Alert, Conversation, Message
from .drains import conversation_enqueue
from .redis_connection import redis_client

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
    minutes away). Those that found it busy wait their turn (`backend_queue_release`)."""
    try:
        if not redis_client().delete(backend_key(backend)):
            return
        logger.info("Model server %s answers again", backend)
    except redis.RedisError:
        logger.warning("Model server %s answered; Redis did not hear of it", backend)
        return
    waiting = Conversation.objects.filter(
        waiting_for=Conversation.WaitingFor.MODEL, brain__in=brains_of(backend)
    )
    if released := conversations_release(waiting, waited_for=backend):
        logger.info("%s conversation(s) waiting for %s go on", released, backend)


def conversations_release(waiting: QuerySet[Conversation], *, waited_for: str) -> int:
    """End the wait of the active conversations among `waiting` and send each a drain; how
    many. A database that cannot say leaves each to its own next try."""
    try:
        active = waiting.filter(state=Conversation.State.ACTIVE)
        ids = list(active.values_list("pk", flat=True))
        active.filter(pk__in=ids).update(retry_at=None, waiting_for=Conversation.WaitingFor.ATTEMPT)
    except (DatabaseError, InterfaceError):
        logger.exception("Conversations waiting for %s left to their next try", waited_for)
        return 0
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


# Take a slot of a backend's semaphore, in turn: leases that ran out are dropped first, and so
# are the queued conversations that neither asked again nor came for their slot within
# ARGV[5] seconds (answered elsewhere, deleted, taken over). A slot is taken (or this holder's
# renewed) when one is free and this conversation (ARGV[4]) is among the first in the queue
# for the free ones, or the queue is shorter than that; otherwise the conversation joins the
# queue, keeping its first place. Without a conversation (a title) it never queues. Redis's
# clock: the hosts' clocks do not matter.
SLOT_TAKE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', t - tonumber(ARGV[5]))) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', KEYS[3], gone)
end
local free = tonumber(ARGV[2]) - redis.call('ZCARD', KEYS[1])
local turn = redis.call('ZSCORE', KEYS[1], ARGV[1]) ~= false
if not turn and free > 0 then
  local ahead = redis.call('ZRANGE', KEYS[2], 0, free - 1)
  turn = #ahead < free
  for _, waiting in ipairs(ahead) do
    if waiting == ARGV[4] then turn = true end
  end
end
if turn then
  redis.call('ZADD', KEYS[1], t + tonumber(ARGV[3]), ARGV[1])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[4])
  return 1
end
if ARGV[4] ~= '' then
  redis.call('ZADD', KEYS[2], 'NX', t, ARGV[4])
  redis.call('ZADD', KEYS[3], t, ARGV[4])
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[6]))
end
return 0
"""
# The queued conversations whose turn it is, first come first: as many as slots are free.
# Telling one its turn does not count as seeing it: only its own ask does (SLOT_TAKE), so one
# that never comes loses its place however often the head is read.
QUEUE_HEAD = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', t)
local free = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
if free <= 0 then return {} end
return redis.call('ZRANGE', KEYS[2], 0, free - 1)
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
# A queued conversation that neither asks again nor comes for its slot this long has gone: it
# loses its place (a busy give-back asks again within CONTINUITY_OPENAI_REQUEST_TIMEOUT).
QUEUE_GONE_SECONDS = 300


def slots_key(backend: str) -> str:
    return f"continuity:backend:{backend}:slots"


def queue_keys(backend: str) -> tuple[str, str]:
    """The conversations waiting for a slot, by when each first asked, and when each was last
    seen (asked again, or was told its turn came)."""
    return f"continuity:backend:{backend}:queue", f"continuity:backend:{backend}:queue:seen"


@contextmanager
def backend_slot(
    backend: str,
    *,
    limit: int,
    wait: float = 0.0,
    stopped: Event | None = None,
    conversation_id: int | None = None,
) -> Iterator[bool]:
    """One of the `limit` requests the model server may serve at once, counted across every
    worker (a semaphore in Redis whose slots are leases): a small local server then queues
    conversations instead of interrupting them. Slots go in turn: a conversation that finds
    none free joins the backend's queue, and the slots freed later go to the queue's first
    (`backend_queue_release`), never to whoever asks first. Yields True once held, False when
    none came within `wait` seconds (0: asked once, so that no process is held waiting). No
    limit (`limit` 0), or no Redis to count in: True at once, as a limit must not stop answers.
    AttemptStopped when `stopped` is set while waiting."""
    if limit <= 0:
        yield True
        return
    client, holder, key = redis_client(), uuid.uuid4().hex, slots_key(backend)
    held = slot_wait(
        client,
        backend,
        holder,
        limit,
        wait=wait,
        stopped=stopped,
        conversation_id=conversation_id,
    )
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
        backend_queue_release(backend, limit=limit)


def slot_wait(
    client: redis.Redis,
    backend: str,
    holder: str,
    limit: int,
    *,
    wait: float,
    stopped: Event | None,
    conversation_id: int | None,
) -> bool | None:
    """Whether a slot was taken within `wait` seconds; None when Redis cannot say."""
    deadline = time.monotonic() + wait
    keys = (slots_key(backend), *queue_keys(backend))
    asking = (holder, limit, SLOT_LEASE_SECONDS, conversation_id or "", QUEUE_GONE_SECONDS)
    try:
        while not client.eval(SLOT_TAKE, 3, *keys, *asking, STATE_SECONDS):
            if stopped is not None and stopped.is_set():
                raise AttemptStopped(f"Stopped while waiting for a slot of {backend}.")
            if time.monotonic() >= deadline:
                return False
            time.sleep(SLOT_POLL_SECONDS)
    except redis.RedisError:
        logger.warning("No slot count for %s; the request goes ahead", backend, exc_info=True)
        return None
    return True


def backend_queue_release(backend: str, *, limit: int) -> int:
    """Send a drain to the conversations whose turn for a slot of `backend` has come (as many
    as slots are free, first come first); how many. Called when a slot is freed, and after each
    busy give-back commits: a slot freed between the give-back's failed take and its commit
    found no conversation waiting in the database, and would otherwise leave it to its whole
    fallback wait."""
    client, keys = redis_client(), (slots_key(backend), *queue_keys(backend))
    for _ in range(QUEUE_HEAD_READS):
        try:
            ahead = [int(pk) for pk in client.eval(QUEUE_HEAD, 3, *keys, limit)]
            if not ahead:
                return 0
            gone = queued_gone(ahead)
            if gone:  # taken over, paused, deleted, or its message stopped or answered
                client.pipeline().zrem(keys[1], *gone).zrem(keys[2], *gone).execute()
                continue  # those behind them move up
        except redis.RedisError:
            return 0  # each waits its fallback, `CONTINUITY_OPENAI_REQUEST_TIMEOUT`
        except (DatabaseError, InterfaceError):
            logger.exception("Conversations queued for %s left to their next try", backend)
            return 0
        waiting = Conversation.objects.filter(
            pk__in=ahead, waiting_for=Conversation.WaitingFor.MODEL_BUSY
        )
        return conversations_release(waiting, waited_for=backend)
    return 0


# How many times a release reads the queue's head again after dropping conversations that went.
QUEUE_HEAD_READS = 5


def queued_gone(conversation_ids: list[int]) -> list[int]:
    """The queued conversations that will not come for a slot: no longer active, or with no
    message waiting. Left in the queue, each would hold a slot's turn until it counts as gone."""
    live = set(
        Message.objects.waiting()
        .filter(conversation_id__in=conversation_ids, conversation__state=Conversation.State.ACTIVE)
        .values_list("conversation_id", flat=True)
    )
    return [pk for pk in conversation_ids if pk not in live]


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
