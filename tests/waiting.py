from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], *, timeout: float, what: str, every: float = 0.05) -> T:
    """Poll until `condition()` is truthy and return it; fail with `what` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"Timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)
