"""How the tests are laid out: what they share is in tests/helpers, and no test module imports
another (import-linter's wildcards cannot name "every module called test_*"); how the code
reads: selectors take keyword arguments only; and how the history reads: commit subjects of at
most 72 characters (docs/contributing.md)."""

from __future__ import annotations

import inspect
import shutil
import subprocess
from pathlib import Path

import grimp
import pytest

# The last commit before the rule: earlier subjects are as long as they were written.
SUBJECTS_RULED_AFTER = "0ce11ba"
SUBJECT_MOST = 72


def is_test_module(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("test_")


def test_no_test_module_imports_another():
    graph = grimp.build_graph("tests")
    imported = {
        (module, other)
        for module in graph.modules
        if is_test_module(module)
        for other in graph.find_modules_directly_imported_by(module)
        if is_test_module(other)
    }
    assert not imported, sorted(imported)


@pytest.mark.parametrize("module_name", ["continuity.selectors", "dashboard.selectors"])
def test_selectors_take_keyword_arguments_only(module_name):
    """A call names what it passes (`exchanges_page(conversation=c, before=m)`): the many
    selectors that take a conversation, a message or an id cannot be given the wrong one."""
    module = __import__(module_name, fromlist=["_"])
    positional = {
        name: [each.name for each in parameters]
        for name, function in inspect.getmembers(module, inspect.isfunction)
        if function.__module__ == module_name
        and (
            parameters := [
                each
                for each in inspect.signature(function).parameters.values()
                if each.kind in (each.POSITIONAL_ONLY, each.POSITIONAL_OR_KEYWORD)
            ]
        )
    }
    assert positional == {}


@pytest.mark.processes  # it runs git
def test_commit_subjects_since_the_rule_are_at_most_72_characters():
    top = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (top / ".git").exists():
        pytest.skip("not a git checkout (an unpacked release): there is no history to read")
    subjects = subprocess.run(
        ["git", "log", "--no-merges", "--format=%h %s", f"{SUBJECTS_RULED_AFTER}..HEAD"],
        cwd=top,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    too_long = [line for line in subjects if len(line.split(" ", 1)[1]) > SUBJECT_MOST]
    assert not too_long, too_long
