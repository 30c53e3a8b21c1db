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


def test_is_not_in_the_next(api, plane):
    assert api.get("/pets").json() == []
    assert api.post("/pets", json={"name": "Tom", "categoryId": 2}).json()["id"] == 1
    plane.post("/faults", json={"operation": "listPets", "status": 503, "times": 1})
    assert api.get("/pets").status_code == 503


def test_and_no_fault_of_another_test_either(api):
    assert api.get("/pets").status_code == 200
"""


def test_the_integration_fixture_gives_each_test_a_tenant(tmp_path: Path) -> None:
    """The fixture starts one service and gives each test a tenant: each starts from empty,
    with no fault of another; the page's example test, waiting on the journal, passes."""
    page = (ROOT / "docs" / "integration.md").read_text()
    fixture, example = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)[:2]
    (tmp_path / "conftest.py").write_text(fixture)
    (tmp_path / "test_use.py").write_text(USE + "\n\n" + example)
    env = environment({"PETSTORE_APP": str(ROOT / "app.py")})
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    ran = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "4 passed" in ran.stdout


def test_the_readme_s_fixture_is_the_integration_page_s() -> None:
    """The README's short fixture is part of the one docs/integration.md runs."""
    readme = (ROOT / "README.md").read_text()
    [short] = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    page = (ROOT / "docs" / "integration.md").read_text()
    assert short in re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)[0]


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
