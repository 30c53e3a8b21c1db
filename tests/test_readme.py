"""The README's curl session runs as written, against a real process, line for line."""

from __future__ import annotations

import re
import subprocess

from tests.conftest import ROOT, ServerFactory


def test_the_readme_session_answers_as_shown(start_server: ServerFactory) -> None:
    """Each `$ curl` of the README's session prints exactly the line shown under it."""
    readme = (ROOT / "README.md").read_text()
    session = re.search(r"```console\n(.*?)```", readme, flags=re.DOTALL)
    assert session, "the README has no console session"
    lines = session[1].splitlines()
    commands = [(line[2:], lines[n + 1]) for n, line in enumerate(lines) if line.startswith("$ ")]
    assert len(commands) >= 5
    server = start_server(key="test-key-0123456789")
    for command, shown in commands:
        here = command.replace("localhost:8000", f"127.0.0.1:{server.port}")
        ran = subprocess.run(here, shell=True, capture_output=True, text=True, check=True)  # noqa: S602
        assert ran.stdout == shown, command
