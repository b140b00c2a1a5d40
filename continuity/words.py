"""Numbers in words, as the pages and notes say them."""

from __future__ import annotations


def plural(count: float, noun: str) -> str:
    """`count` `noun`, the noun in the plural unless the count is one: "1 message", "2.5 s"."""
    return f"{count:g} {noun}{'' if count == 1 else 's'}"
