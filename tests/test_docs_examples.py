"""The examples of docs/ run as written: the pytest fixture of docs/integration.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, environment

USE = """
def test_a_pet_made_in_one_test(api):
    assert api.post("/pets", json={"name": "Rex", "categoryId": 1}).json()["id"] == 1


def test_is_gone_in_the_next(api):
    assert api.get("/pets").json() == []
    assert api.post("/pets", json={"name": "Tom", "categoryId": 2}).json()["id"] == 1
"""


def test_the_integration_fixture_resets_between_tests(tmp_path: Path) -> None:
    """The fixture starts one service, reads its address, and each test starts from empty."""
    page = (ROOT / "docs" / "integration.md").read_text()
    fixture = re.search(r"## A pytest fixture.*?```python\n(.*?)```", page, flags=re.DOTALL)
    assert fixture, "docs/integration.md has no fixture"
    (tmp_path / "conftest.py").write_text(fixture[1])
    (tmp_path / "test_use.py").write_text(USE)
    env = environment({"PETSTORE_APP": str(ROOT / "app.py")})
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    ran = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "2 passed" in ran.stdout


def test_every_relative_link_resolves() -> None:
    """Each relative link of the README and docs/ names a file of the repository."""
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if (
                not target.startswith(("http://", "https://"))
                and not (page.parent / target).exists()
            ):
                broken.append(f"{page.name}: {target}")
    assert broken == []


def test_nothing_points_at_documents_the_repository_does_not_hold() -> None:
    """No code, test or page cites the design documents that live outside the repository."""
    names = ("CONTRACT" + ".md", "SPEC" + ".md", "STYLE" + ".md", "../" + "shared")
    files = [
        *ROOT.glob("*.py"),
        *ROOT.glob("*.md"),
        *ROOT.glob("docs/*.md"),
        *ROOT.glob("tests/*.py"),
    ]
    files += [*ROOT.glob("bench/*"), ROOT / "Containerfile", ROOT / "Makefile"]
    cited = [f"{path.name}: {name}" for path in files for name in names if name in path.read_text()]
    assert cited == []
