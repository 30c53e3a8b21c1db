"""The Containerfile: small, non-root, locked, Python as PID 1 (linted and read, not built)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, ServerFactory, free_port

CONTAINERFILE = ROOT / "Containerfile"

Instruction = tuple[str, str]  # (INSTRUCTION, its arguments on one line)


def stages() -> list[list[Instruction]]:
    """The Containerfile's instructions per stage, each stage starting with its FROM."""
    logical = re.sub(r"\\\n", " ", CONTAINERFILE.read_text(encoding="utf-8"))
    found: list[list[Instruction]] = []
    for line in logical.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        keyword, _, arguments = line.strip().partition(" ")
        if keyword.upper() == "FROM":
            found.append([])
        found[-1].append((keyword.upper(), " ".join(arguments.split())))
    return found


def arguments(stage: list[Instruction], keyword: str) -> list[str]:
    return [args for name, args in stage if name == keyword]


def local_copies() -> set[str]:
    """Files copied from the build context (not from another stage) in any stage."""
    sources: set[str] = set()
    for stage in stages():
        for args in arguments(stage, "COPY"):
            if not args.startswith("--from"):
                sources.update(args.split()[:-1])
    return sources


def test_hadolint_is_clean() -> None:
    """hadolint (from the venv) reports nothing on the Containerfile, style level included."""
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--no-color", "--failure-threshold", "style", str(CONTAINERFILE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_stages_on_slim_python_of_the_lock() -> None:
    """Two stages on one slim python image whose minor version is the lock's."""
    header = (ROOT / "requirements.lock").read_text(encoding="utf-8")[:1000]
    lock_version = re.search(r"--python-version (\d+\.\d+)\b", header)
    assert lock_version, "requirements.lock's header names no --python-version"
    images = [stage[0][1].split()[0] for stage in stages()]
    assert len(images) == 2
    assert images[0] == images[1], "the venv is copied between stages: same interpreter"
    image = re.fullmatch(r"python:(\d+\.\d+)\.\d+-slim(-[a-z]+)?", images[1])
    assert image, f"not a patch-pinned slim python image: {images[1]}"
    assert image[1] == lock_version[1]


def test_lock_installed_with_hashes_and_only_the_venv_copied() -> None:
    """The build stage installs the lock with --require-hashes; the runtime takes only the venv."""
    # The build stage then takes pip and setuptools out of the venv (25 MB the service never runs).
    build, runtime = stages()
    installs = [args for args in arguments(build, "RUN") if "pip install" in args]
    assert len(installs) == 1
    for flag in ("--require-hashes", "--no-deps", "--no-cache-dir", "-r /tmp/requirements.lock"):
        assert flag in installs[0]
    assert installs[0].endswith("pip uninstall --quiet --yes pip setuptools")
    assert not any("pip install" in args for args in arguments(runtime, "RUN"))
    assert f"--from={build[0][1].split()[-1]} /opt/venv /opt/venv" in arguments(runtime, "COPY")


def test_image_and_context_carry_every_module_and_nothing_else() -> None:
    """The top-level modules, the lock and the licence are copied; the ignore files let in those."""
    # The licence: MIT asks for its notice in every copy, and the image is one.
    assert local_copies() == {"*.py", "requirements.lock", "LICENSE"}
    ignore = (ROOT / ".containerignore").read_text(encoding="utf-8")
    assert (ROOT / ".dockerignore").read_text(encoding="utf-8") == ignore
    patterns = [line for line in ignore.splitlines() if line and not line.startswith("#")]
    assert patterns[0] == "*"
    assert {pattern.removeprefix("!") for pattern in patterns[1:]} == local_copies()


def test_runs_as_numeric_non_root_user_owning_the_data_directory() -> None:
    """USER is numeric, not root, and owns /data with group root, group-writable; no VOLUME."""
    # /data writable by group root: an arbitrary uid in group 0, as OpenShift runs images, writes it
    # too (the image test checks). No VOLUME: it made an anonymous volume for every container, pets
    # in memory or not.
    runtime = stages()[-1]
    user = arguments(runtime, "USER")[-1]
    assert re.fullmatch(r"[0-9]+(:[0-9]+)?", user), user
    uid = user.split(":")[0]
    assert int(uid) != 0
    assert any(f"chown {uid}:0 /data && chmod 2775 /data" in a for a in arguments(runtime, "RUN"))
    assert not arguments(runtime, "VOLUME")


def test_the_service_s_modules_are_compiled_in_the_image() -> None:
    """The service's user can't write /app: compiled at build time, or at every start."""
    runtime = stages()[-1]
    assert "python -m compileall -q /app" in arguments(runtime, "RUN")


def test_listens_on_all_interfaces_on_the_exposed_port() -> None:
    """PETSTORE_HOST is 0.0.0.0 and EXPOSE names PETSTORE_PORT."""
    env = " ".join(arguments(stages()[-1], "ENV"))
    assert "PETSTORE_HOST=0.0.0.0" in env
    port = re.search(r"PETSTORE_PORT=(\d+)", env)
    assert port
    assert arguments(stages()[-1], "EXPOSE") == [port[1]]


def test_python_is_pid_1_with_a_shutdown_budget_under_the_stop_timeout() -> None:
    """Exec-form ENTRYPOINT runs app.py; SIGTERM stops it; graceful shutdown takes under 10 s."""
    # The ENTRYPOINT takes the flags given after the image's name (no CMD: none by default).
    runtime = stages()[-1]
    assert json.loads(arguments(runtime, "ENTRYPOINT")[-1]) == ["python", "app.py"]
    assert json.loads(arguments(runtime, "CMD")[-1]) == []
    assert arguments(runtime, "STOPSIGNAL") == ["SIGTERM"]
    budget = re.search(r"timeout_graceful_shutdown=(\d+)", (ROOT / "server.py").read_text())
    assert budget
    assert int(budget[1]) < 10  # docker and podman stop after 10 s; Kubernetes after 30 s


def healthcheck_command() -> list[str]:
    (healthcheck,) = arguments(stages()[-1], "HEALTHCHECK")
    command: list[str] = json.loads(healthcheck.partition(" CMD ")[2])
    return command


def test_healthcheck_is_the_service_s_own_command() -> None:
    """HEALTHCHECK is exec-form `python app.py healthcheck`: no curl, no inline script."""
    assert healthcheck_command() == ["python", "app.py", "healthcheck"]


def test_healthcheck_command_follows_the_service_on_petstore_port(
    start_server: ServerFactory,
) -> None:
    """The healthcheck passes on the service's PETSTORE_PORT and fails where nothing listens."""
    # It passes even with a dead HTTP proxy configured.
    server = start_server()
    check = [sys.executable, *healthcheck_command()[1:]]
    dead_proxy = f"http://127.0.0.1:{free_port()}"

    def run(port: int) -> subprocess.CompletedProcess[bytes]:
        env = {"PETSTORE_PORT": str(port), "http_proxy": dead_proxy, "HTTP_PROXY": dead_proxy}
        env["PETSTORE_HOST"] = "0.0.0.0"  # noqa: S104 - as in the image: probes the loopback
        return subprocess.run(
            check, env=env, cwd=ROOT, capture_output=True, timeout=10, check=False
        )

    healthy = run(server.port)
    assert healthy.returncode == 0, healthy.stderr
    assert run(free_port()).returncode == 1
