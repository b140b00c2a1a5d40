"""Readable differences between two versions of a handoff or a summary."""

from __future__ import annotations

import difflib


def versions_diff(*, old: str, new: str, old_label: str, new_label: str) -> list[tuple[str, str]]:
    """(kind, line) pairs of a unified diff; kind is "added", "removed", "context" or "hunk"."""
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), old_label, new_label, lineterm="", n=3
    )
    kinds = {"+": "added", "-": "removed", "@": "hunk"}
    return [
        ("header" if line.startswith(("+++", "---")) else kinds.get(line[:1], "context"), line)
        for line in lines
    ]
