"""The words the product counts with."""

from __future__ import annotations

import pytest

from continuity.words import clip, plural


@pytest.mark.parametrize(
    ("count", "noun", "said"),
    [
        (1, "reply", "1 reply"),
        (3, "reply", "3 replies"),
        (0, "crash", "0 crashes"),
        (2, "recovery", "2 recoveries"),
        (2, "day", "2 days"),
        (2.5, "dead letter", "2.5 dead letters"),
        (2, "message", "2 messages"),
        (4, "box", "4 boxes"),
    ],
)
def test_plural_says_the_noun_as_english_does(count, noun, said):
    assert plural(count, noun) == said


def test_clip_cuts_between_words():
    assert clip("a wood stove for the winter", 16) == "a wood stove…"
    assert clip("short", 16) == "short"
