"""The house: a flat handful of small modules, each opening with one line, imports one way."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

MODULES = {path.stem: ast.parse(path.read_text()) for path in ROOT.glob("*.py")}


def imports(tree: ast.Module) -> set[str]:
    """The project's modules a module imports, anywhere in it."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.partition(".")[0])
    return found & MODULES.keys()


def test_at_most_15_modules_3400_lines_none_over_400() -> None:
    """The service stays small: at most 15 modules and 3,400 lines, none over 400."""
    lines = {name: len((ROOT / f"{name}.py").read_text().splitlines()) for name in MODULES}
    assert len(lines) <= 15
    assert sum(lines.values()) <= 3400, lines
    assert {name: n for name, n in lines.items() if n > 400} == {}


def test_every_module_opens_with_a_one_line_docstring() -> None:
    """Each module says what it owns in one line."""
    docstrings = {name: ast.get_docstring(tree) or "" for name, tree in MODULES.items()}
    assert {name: text for name, text in docstrings.items() if not text or "\n" in text} == {}


def test_imports_flow_one_way() -> None:
    """No module imports, through any chain, a module that imports it back."""

    def reach(name: str, seen: set[str]) -> set[str]:
        for imported in imports(MODULES[name]) - seen:
            seen.add(imported)
            reach(imported, seen)
        return seen

    assert {name for name in MODULES if name in reach(name, set())} == set()
