"""Test-only fault injection at named points of the engine.

Inert unless settings.CONTINUITY_FAULT_INJECTION is True, which only tests/settings.py sets: the
production settings hard-code it to False and read no environment variable for it.
"""

from __future__ import annotations

import os
import signal

from django.conf import settings

KILL_AT_ENV = "CONTINUITY_FAULT_KILL_AT"
ONCE_FILE_ENV = "CONTINUITY_FAULT_ONCE_FILE"
# The signal the process sends itself there (a name: SIGSTOP freezes it); SIGKILL by default.
SIGNAL_ENV = "CONTINUITY_FAULT_SIGNAL"


def fault_point(name: str) -> None:
    """Signal this process here (SIGKILL unless the test chose another signal) if the test armed
    this point, at most once per marker file."""
    if not settings.CONTINUITY_FAULT_INJECTION or os.environ.get(KILL_AT_ENV) != name:
        return
    marker = os.environ.get(ONCE_FILE_ENV)
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.Signals[os.environ.get(SIGNAL_ENV, "SIGKILL")])
