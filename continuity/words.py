"""Numbers and texts in words, as the pages and notes say them."""

from __future__ import annotations


def plural(count: float, noun: str) -> str:
    """`count` `noun`, the noun in the plural unless the count is one: "1 message", "2.5 s"."""
    return f"{count:g} {noun}{'' if count == 1 else 's'}"


def clip(text: str, limit: int = 120, *, strip: str = "") -> str:
    """`text` on one line (its white space folded, then `strip` taken off its ends), cut to at
    most `limit` characters with an ellipsis: how a message is quoted in a note, a reply or
    the console."""
    text = " ".join(text.split()).strip(strip or None)
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
