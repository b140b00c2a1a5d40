"""Rate limits on what makes the workers busy (sending messages and starting conversations,
per user) and on what sends mail (password reset requests, per client address). Counted in
Redis by the `limits` library, so every web server shares them."""

from __future__ import annotations

import functools
import logging
import math
import time

from django.conf import settings
from limits import RateLimitItem, parse_many
from limits.errors import StorageError
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

logger = logging.getLogger(__name__)
RATES = {
    "send": "CONTINUITY_SEND_RATE",
    "new_conversation": "CONTINUITY_NEW_CONVERSATION_RATE",
    "password_reset": "CONTINUITY_PASSWORD_RESET_RATE",
    "password_reset_mail": "CONTINUITY_PASSWORD_RESET_MAIL_RATE",
}


@functools.cache
def limiter(storage_uri: str) -> MovingWindowRateLimiter:
    """Over Redis: its server, or the primary its Sentinels name (RATE_LIMIT_STORAGE_URI)."""
    storage = storage_from_string(
        storage_uri,
        wrap_exceptions=True,
        socket_timeout=1,
        socket_connect_timeout=1,
        **settings.RATE_LIMIT_STORAGE_OPTIONS,
    )
    return MovingWindowRateLimiter(storage)


def rates(action: str) -> list[RateLimitItem]:
    return parse_many(getattr(settings, RATES[action]))


def rate_limit_wait(*, action: str, who: int | str) -> int:
    """0 if `who` (a user's id, or a client's address) may do `action` now (and count it),
    else the seconds to wait first.

    Fails open: when Redis cannot answer, nothing is refused (messages are stored in the
    database, which does not need Redis).
    """
    key = str(who)
    try:
        checker = limiter(settings.RATE_LIMIT_STORAGE_URI)
        for rate in rates(action):
            if not checker.test(rate, action, key):
                reset_at = checker.get_window_stats(rate, action, key).reset_time
                return max(1, math.ceil(reset_at - time.time()))
        for rate in rates(action):
            checker.hit(rate, action, key)
    except StorageError:
        logger.warning("Rate limit of %s not checked: Redis unavailable", action, exc_info=True)
    return 0
