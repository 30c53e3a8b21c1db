"""The modules as the README's table "Where things are" lists them, imports flowing down it."""

from __future__ import annotations

import ast
import re

from tests.conftest import ROOT


def table_order() -> list[str]:
    """The modules the README's table lists, top to bottom."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)\.py` \|", section, flags=re.MULTILINE)


def project_imports(module: str, modules: set[str]) -> set[str]:
    """The project's modules that `module` imports, anywhere in it."""
    tree = ast.parse((ROOT / f"{module}.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.partition(".")[0])
    return imported & modules


def test_the_table_lists_every_module_once() -> None:
    """Every top-level module is in the table, once, and the table names no other."""
    listed = table_order()
    assert sorted(listed) == sorted(path.stem for path in ROOT.glob("*.py"))


def test_each_module_imports_only_modules_below_it_in_the_table() -> None:
    """A module imports only modules listed below it: no import goes up, so there is no cycle."""
    listed = table_order()
    upward = {
        module: sorted(imported)
        for position, module in enumerate(listed)
        if (imported := project_imports(module, set(listed)) - set(listed[position + 1 :]))
    }
    assert upward == {}
