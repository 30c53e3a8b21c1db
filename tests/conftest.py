"""Fixtures: the app in-process (httpx's ASGI transport) and as a real `python app.py` process."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from app import Petstore, create_app
from settings import Settings
from store import MemoryStore
from tests.postgres import NOT_INSTALLED, Cluster

ROOT = Path(__file__).resolve().parent.parent
KEY = "test-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def settings() -> Settings:
    return Settings(api_keys=(KEY,))


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def app(settings: Settings, store: MemoryStore) -> Petstore:
    """The app over a store the test can reach."""
    return create_app(settings, store)


@pytest.fixture
def read_access_log(app: Petstore) -> Iterator[Callable[[], str]]:
    """The in-process app's access-log lines so far, as text."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    access = logging.getLogger("petstore.access")
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)

    def read() -> str:
        app.requests.flush()
        return stream.getvalue()

    yield read
    access.removeHandler(handler)
    access.setLevel(level)


def assert_error(response: httpx.Response, status: int, code: str) -> str:
    """The Error shape with this status and code, served as application/json; its message."""
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body == {"code": code, "message": body["message"], "status": status}
    assert isinstance(body["message"], str)
    assert body["message"]
    message: str = body["message"]
    return message


@contextlib.asynccontextmanager
async def serving(app: Petstore) -> AsyncIterator[httpx.AsyncClient]:
    """An authenticated client of the in-process app, lifespan started."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app.router),
        httpx.AsyncClient(transport=transport, base_url="http://petstore", headers=AUTH) as c,
    ):
        yield c


@pytest.fixture
async def client(app: Petstore) -> AsyncIterator[httpx.AsyncClient]:
    """An authenticated client of the in-process app, lifespan started."""
    async with serving(app) as c:
        yield c


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it ends the connection (a reset fails the test)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        raise AssertionError(f"connection still open; received {received!r}") from None
    return received


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    """A running `python app.py`, its output in files."""

    process: subprocess.Popen[bytes]
    port: int
    stdout_path: Path
    stderr_path: Path
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers, timeout=10, **kwargs)  # type: ignore[arg-type]

    def wait_ready(self, timeout: float = 15.0) -> None:
        """Poll /readyz until 200; fail with the server's output if it exits or never gets there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited {self.process.returncode}: {self.stderr}")
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)  # a poll interval, not synchronisation: the loop checks readiness
        raise AssertionError(f"server not ready in {timeout}s: {self.stderr}")

    def wait_for_output(self, text: str, timeout: float = 10.0) -> str:
        """Poll stdout until it contains `text` (the access log is written in batches)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in (out := self.stdout):
                return out
            time.sleep(0.05)
        raise AssertionError(f"{text!r} not in output: {self.stdout}")

    def stop(self, timeout: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


ServerFactory = Callable[..., Server]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start `python app.py ARGS` on a free port with ENV; killed at the end if still running."""
    started: list[Server] = []

    def start(
        *args: str,
        env: dict[str, str] | None = None,
        key: str | None = KEY,
        wait: bool = True,
    ) -> Server:
        port = free_port()
        number = len(started)
        stdout_path = tmp_path / f"server{number}.out"
        stderr_path = tmp_path / f"server{number}.err"
        argv = [sys.executable, str(ROOT / "app.py"), "--port", str(port), *args]
        if key is not None:
            argv += ["--api-key", key]
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = subprocess.Popen(argv, stdout=out, stderr=err, env=environment(env), cwd=ROOT)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        server = Server(process, port, stdout_path, stderr_path, headers)
        started.append(server)
        if wait:
            server.wait_ready()
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


# --------------------------------------------------------------------------- launched by hand

Launcher = Callable[[list[str], dict[str, str], int], Server]
WRONG_KEY = {"code": "unauthorized", "message": "The API key is not accepted", "status": 401}


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without PETSTORE_* variables, plus `extra`."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("PETSTORE_")}
    return clean | (extra or {})


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.05)  # a poll interval, not synchronisation: the loop checks the condition


def answers(base_url: str) -> bool:
    """Whether something at `base_url` answers /healthz with 200."""
    try:
        return httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launcher]:
    """Start ARGV in the project directory with ENV; SIGTERM (then SIGKILL) at the end."""
    started: list[Server] = []

    def start(argv: list[str], env: dict[str, str], port: int) -> Server:
        number = len(started)
        stdout_path = tmp_path / f"launched{number}.out"
        stderr_path = tmp_path / f"launched{number}.err"
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = subprocess.Popen(argv, stdout=out, stderr=err, env=environment(env), cwd=ROOT)
        server = Server(process, port, stdout_path, stderr_path)
        started.append(server)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
            try:
                server.process.wait(10)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait()


# --------------------------------------------------------------------------- PostgreSQL


def _cluster() -> Cluster:
    try:
        cluster = Cluster()
    except RuntimeError as error:
        pytest.fail(f"{error}" if str(error) == NOT_INSTALLED else f"initdb failed: {error}")
    cluster.start()
    return cluster


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """One server for the suite; each test takes a database of its own on it."""
    cluster = _cluster()
    yield cluster
    cluster.destroy()


@pytest.fixture
def own_postgres() -> Iterator[Cluster]:
    """A server of the test's own, for tests that stop it."""
    cluster = _cluster()
    yield cluster
    cluster.destroy()


@pytest.fixture
def database_url(postgres: Cluster) -> str:
    """A new, empty database on the suite's server."""
    return postgres.new_database()


# --------------------------------------------------------------------------- under strace

STRACE = shutil.which("strace") or "/usr/bin/strace"


def child_of(parent: int) -> int:
    """The pid of the process whose parent is `parent` (strace's one child: the service)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process went away while we looked
            continue
        # Fields after the command name, which is in parentheses and may hold spaces.
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            return int(entry.name)
    raise AssertionError(f"process {parent} has no child")


@dataclass
class TracedServer(Server):
    """`python app.py` run by strace; `process` is strace, signals go to the service itself."""

    def stop(self, timeout: float = 15.0) -> int:
        if self.process.poll() is None:
            os.kill(child_of(self.process.pid), signal.SIGTERM)
        return self.process.wait(timeout)  # strace ends once the service has ended

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(child_of(self.process.pid), signal.SIGKILL)
            self.process.wait(15)


TracedFactory = Callable[..., TracedServer]


@pytest.fixture
def start_traced(tmp_path: Path) -> Iterator[TracedFactory]:
    """Start `strace -f -qq -o /dev/null STRACE_ARGS python app.py --data DATA` on a free port,
    like conftest's start_server; killed at the end if still running."""
    started: list[TracedServer] = []

    def start(data: Path, *strace_args: str) -> TracedServer:
        port = free_port()
        number = len(started)
        stdout_path = tmp_path / f"traced{number}.out"
        stderr_path = tmp_path / f"traced{number}.err"
        argv = [
            STRACE,
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            *strace_args,
            sys.executable,
            str(ROOT / "app.py"),
            "--data",
            str(data),
            "--port",
            str(port),
            "--api-key",
            KEY,
        ]
        with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
            process = subprocess.Popen(argv, stdout=out, stderr=err, env=environment(), cwd=ROOT)
        server = TracedServer(process, port, stdout_path, stderr_path, dict(AUTH))
        started.append(server)
        server.wait_ready()
        return server

    yield start
    for server in started:
        server.kill()
