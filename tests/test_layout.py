"""How the tests are laid out: what they share is in tests/helpers, and no test module imports
another (import-linter's wildcards cannot name "every module called test_*")."""

from __future__ import annotations

import grimp


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
