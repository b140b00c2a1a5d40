"""How many conversation sockets each person has open, across every web server: one person
opening sockets without end (40 on one conversation were all accepted) would hold a web
server's memory and its channel layer's groups. Counted in Redis, a sorted set per person
whose members are the sockets' channel names and whose scores are when each entry lapses: a
web server refreshes its sockets' entries, so those of a server that died lapse by
themselves."""

from __future__ import annotations

import logging
import time

import redis
from django.conf import settings

from continuity.delivery import redis_client

logger = logging.getLogger(__name__)

# An entry lapses this long after its last refresh; an open socket refreshes it three times
# as often.
ENTRY_SECONDS = 60
REFRESH_SECONDS = ENTRY_SECONDS / 3


def sockets_key(user_id: int) -> str:
    return f"continuity:sockets:{user_id}"


def socket_count_in(*, user_id: int, channel: str) -> bool:
    """Count this socket for the person; False if that took them past the cap, in which case
    it is not counted and must be closed. Fails open: when Redis cannot answer, the socket is
    let in (the channel layer, on the same Redis, decides whether it works)."""
    key, now = sockets_key(user_id), time.time()
    try:
        with redis_client().pipeline() as pipe:  # MULTI/EXEC: the count includes this one
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zadd(key, {channel: now + ENTRY_SECONDS})
            pipe.zcard(key)
            pipe.expire(key, ENTRY_SECONDS)
            open_now = pipe.execute()[2]
        if open_now > settings.CONTINUITY_SOCKETS_PER_USER:
            redis_client().zrem(key, channel)
            return False
    except redis.RedisError:
        logger.warning("Sockets of user %s not counted: Redis unavailable", user_id)
    return True


def socket_refresh(*, user_id: int, channel: str) -> None:
    key = sockets_key(user_id)
    try:
        with redis_client().pipeline() as pipe:
            # Only an entry that is there: a refresh that ran late, after the socket closed,
            # must not count it in again (one Redis lost is let go: its socket counts no more).
            pipe.zadd(key, {channel: time.time() + ENTRY_SECONDS}, xx=True)
            pipe.expire(key, ENTRY_SECONDS)
            pipe.execute()
    except redis.RedisError:  # the next refresh tries again; meanwhile the entry may lapse
        logger.warning("Socket %s of user %s not refreshed: Redis unavailable", channel, user_id)


def socket_count_out(*, user_id: int, channel: str) -> None:
    try:
        redis_client().zrem(sockets_key(user_id), channel)
    except redis.RedisError:  # it lapses by itself
        logger.warning("Socket %s of user %s not uncounted: Redis unavailable", channel, user_id)
