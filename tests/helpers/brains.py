"""A brain for fault tests: the built-in brain plus triggers that crash or fail on purpose."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chat.brains.builtin import BuiltinBrain
from continuity.brains import Context
from continuity.errors import PermanentError

KILL_ALWAYS = "[[kill-worker]]"  # SIGKILLs its own process mid-reply, on every attempt
KILL_FIRST_ATTEMPT = "[[kill-once]]"  # SIGKILLs its own process mid-reply, on attempt 1 only
KILL_TWICE = "[[kill-twice]]"  # SIGKILLs its own process mid-reply, on attempts 1 and 2
RAISE = "[[raise]]"  # a Python exception on every attempt
INVALID = "[[invalid]]"  # an error no retry can fix
SLEEP = "[[sleep]]"  # sleeps far longer than the soft time limit
HANG = "[[hang]]"  # hangs and swallows the soft time limit: only the hard limit ends it


class FaultyBrain(BuiltinBrain):
    def __init__(self) -> None:
        if not settings.CONTINUITY_FAULT_INJECTION:
            raise ImproperlyConfigured("FaultyBrain exists for the test suite only.")

    def plan(self, context: Context) -> dict:
        if INVALID in context.text:
            raise PermanentError("The message asks for something that can never succeed.")
        return super().plan(context)

    def respond(self, context: Context, plan: dict) -> Iterator[str]:
        for index, token in enumerate(super().respond(context, plan)):
            if index == 3:
                if (
                    KILL_ALWAYS in context.text
                    or (KILL_FIRST_ATTEMPT in context.text and context.attempt == 1)
                    or (KILL_TWICE in context.text and context.attempt <= 2)
                ):
                    os.kill(os.getpid(), signal.SIGKILL)
                if RAISE in context.text:
                    raise RuntimeError("The brain tripped over this message.")
                if SLEEP in context.text:
                    time.sleep(3600)
                if HANG in context.text:
                    hang_forever()
            yield token


def hang_forever() -> None:
    """A hung call that swallows even the soft time limit's exception."""
    while True:
        with contextlib.suppress(BaseException):
            time.sleep(3600)
