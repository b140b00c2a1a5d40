"""Numbers and texts in words, as the pages and notes say them."""

from __future__ import annotations


def plural(count: float, noun: str) -> str:
    """`count` `noun`, the noun in the plural unless the count is one: "1 message", "2 replies",
    "3 crashes"."""
    if count == 1:
        return f"{count:g} {noun}"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return f"{count:g} {noun[:-1]}ies"
    if noun.endswith(("s", "sh", "ch", "x", "z")):
        return f"{count:g} {noun}es"
    return f"{count:g} {noun}s"


def clip(text: str, limit: int = 120, *, strip: str = "") -> str:
    """`text` on one line (its white space folded, then `strip` taken off its ends), cut to at
    most `limit` characters with an ellipsis, between words (inside one only when a single
    word fills the first half): how a message is quoted in a note, a reply or the console."""
    text = " ".join(text.split()).strip(strip or None)
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if text[limit - 1] != " " and (space := cut.rfind(" ")) > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"
