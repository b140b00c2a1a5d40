"""Reading the environment: one helper, which names the variable when its value is not one."""

from __future__ import annotations

import json
import os
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


def env(name: str, default: T) -> T:
    """The environment variable `name`, read as what `default` is: a string, a path, a flag
    (1, true, yes or on; 0, false, no, off or empty), a whole number, a number, or a
    comma-separated list (of numbers when `default`'s items are numbers). Unset: `default`. A
    value that is not one: ImproperlyConfigured, naming the variable and what it expected."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if isinstance(default, bool):
        if raw.strip().lower() in TRUE | FALSE:
            return raw.strip().lower() in TRUE  # type: ignore[return-value]
        raise ImproperlyConfigured(
            f"{name}={raw!r}: expected 1 or 0 (true or false, yes or no, on or off)."
        )
    if isinstance(default, list):
        item_type = type(default[0]) if default else str
        return [_cast(name, item.strip(), item_type) for item in raw.split(",") if item.strip()]  # type: ignore[return-value]
    return _cast(name, raw, type(default))


def _cast(name: str, raw: str, kind: type) -> object:
    try:
        return kind(raw)
    except ValueError:
        expected = {int: "a whole number", float: "a number"}.get(kind, kind.__name__)
        raise ImproperlyConfigured(f"{name}={raw!r}: expected {expected}.") from None


def env_json(name: str, default: T) -> T:
    """The environment variable `name` as JSON of `default`'s type (a list, an object). Unset
    or empty: `default`."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}: not JSON ({exc}).") from None
    if not isinstance(value, type(default)):
        raise ImproperlyConfigured(f"{name}: expected a JSON {type(default).__name__}.")
    return value
