"""The real process: settings from flags and the environment, the generated key, bad settings,
SIGTERM, the access log, stalled clients, `uvicorn app:app`, and the probes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import KEY, ROOT, Server, ServerFactory, free_port

Launcher = Callable[[list[str], dict[str, str], int], Server]

OTHER_KEY = "other-key-9876543210"
MISSING_KEY = {
    "code": "unauthorized",
    "message": "Missing credential: send Authorization: Bearer <API key>",
    "status": 401,
}
WRONG_KEY = {"code": "unauthorized", "message": "The API key is not accepted", "status": 401}
PLAIN_CHALLENGE = 'Bearer realm="petstore"'
REFUSED_KEY_CHALLENGE = 'Bearer realm="petstore", error="invalid_token"'
GENERATED_KEY_LINE = re.compile(
    r"petstore: no API key configured; this run accepts: Bearer (?P<key>\S+)"
)
# client "METHOD path" status duration, e.g. `127.0.0.1 "GET /v1/pets" 200 0.41ms`
ACCESS_LINE = re.compile(r'^\S+ "[A-Z]+ /\S*" \d{3} \d+us$', re.MULTILINE)


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


def fill(
    args: list[str], env: dict[str, str], paths: dict[str, Path]
) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment with `{name}` placeholders replaced by paths."""
    names = {name: str(path) for name, path in paths.items()}
    return [arg.format(**names) for arg in args], {k: v.format(**names) for k, v in env.items()}


def pet_body(size: int) -> bytes:
    """A valid NewPet of exactly `size` bytes."""
    frame = b'{"name":"","categoryId":1}'
    return frame[:9] + b"x" * (size - len(frame)) + frame[9:]


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's timeout applies)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        raise AssertionError(f"connection still open; received {received!r}") from None
    return received


def parse_response(raw: bytes) -> tuple[str, dict[str, str], Any]:
    """The status line, headers (lower-case names) and JSON body of one raw HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status_line, headers, json.loads(body)


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


# --------------------------------------------------------------------------- settings


def test_port_from_the_environment(launch: Launcher) -> None:
    """PETSTORE_PORT sets the port when no --port is given."""
    port = free_port()
    server = launch(
        [sys.executable, "app.py", "--api-key", KEY], {"PETSTORE_PORT": str(port)}, port
    )
    server.wait_ready()
    assert server.stop() in (0, -15)


def test_port_flag_wins_over_the_environment(start_server: ServerFactory) -> None:
    """--port wins over PETSTORE_PORT: the service answers on the flag's port only."""
    other = free_port()
    server = start_server(env={"PETSTORE_PORT": str(other)})
    assert answers(server.base_url)
    assert not answers(f"http://127.0.0.1:{other}")


@pytest.mark.parametrize(
    ("args", "env", "host"),
    [
        pytest.param(["--host", "127.0.0.2"], {}, "127.0.0.2", id="flag"),
        pytest.param([], {"PETSTORE_HOST": "127.0.0.2"}, "127.0.0.2", id="env"),
        pytest.param(
            ["--host", "127.0.0.3"], {"PETSTORE_HOST": "127.0.0.2"}, "127.0.0.3", id="flag-wins"
        ),
    ],
)
def test_host_setting_chooses_the_listening_address(
    start_server: ServerFactory, args: list[str], env: dict[str, str], host: str
) -> None:
    """The service listens on the configured loopback address, not on the default 127.0.0.1."""
    server = start_server(*args, env=env, wait=False)
    wait_until(
        lambda: server.process.poll() is not None or answers(f"http://{host}:{server.port}"),
        f"an answer on {host}",
    )
    assert server.process.poll() is None, server.stderr
    assert not answers(server.base_url)


# Arguments, environment ({keys} and {other_keys} are key files), and each key's verdict.
KEY_CASES = [
    pytest.param(
        ["--api-key", "flag-a", "--api-key", "flag-b"],
        {},
        {"flag-a": True, "flag-b": True},
        id="flag-repeated",
    ),
    pytest.param(
        [],
        {"PETSTORE_API_KEYS": "env-a,env-b,env-c"},
        {"env-a": True, "env-b": True, "env-c": True},
        id="env-comma-separated",
    ),
    pytest.param(
        ["--api-key", "flag-a"],
        {"PETSTORE_API_KEYS": "env-a,env-b"},
        {"flag-a": True, "env-a": False, "env-b": False},
        id="flag-wins-over-env",
    ),
    pytest.param(
        ["--api-key-file", "{keys}"], {}, {"file-a": True, "file-b": True}, id="file-flag"
    ),
    pytest.param(
        [], {"PETSTORE_API_KEYS_FILE": "{keys}"}, {"file-a": True, "file-b": True}, id="file-env"
    ),
    pytest.param(
        ["--api-key-file", "{keys}"],
        {"PETSTORE_API_KEYS_FILE": "{other_keys}"},
        {"file-a": True, "file-b": True, "other-file-key": False},
        id="file-flag-wins-over-env",
    ),
    pytest.param(
        ["--api-key", "flag-a", "--api-key-file", "{keys}"],
        {},
        {"flag-a": True, "file-a": True, "file-b": True},
        id="flag-and-file",
    ),
    pytest.param(
        [],
        {"PETSTORE_API_KEYS": "env-a", "PETSTORE_API_KEYS_FILE": "{keys}"},
        {"env-a": True, "file-a": True, "file-b": True},
        id="env-and-file",
    ),
]


@pytest.mark.parametrize(("args", "env", "verdicts"), KEY_CASES)
def test_api_keys_from_flags_environment_and_files(
    start_server: ServerFactory,
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    verdicts: dict[str, bool],
) -> None:
    """Every configured key is accepted; keys the winning setting does not name get 401."""
    keys, other_keys = tmp_path / "keys.txt", tmp_path / "other-keys.txt"
    keys.write_text("file-a\nfile-b\n")
    other_keys.write_text("other-file-key\n")
    args, env = fill(args, env, {"keys": keys, "other_keys": other_keys})
    server = start_server(*args, env=env, key=None)
    with server.client() as http:
        for key, accepted in {**verdicts, "never-configured": False}.items():
            response = http.get("/v1/pets", headers=bearer(key))
            if accepted:
                assert (key, response.status_code, response.json()) == (key, 200, [])
            else:
                assert (key, response.status_code, response.json()) == (key, 401, WRONG_KEY)
                assert response.headers["www-authenticate"] == REFUSED_KEY_CHALLENGE
    assert "petstore: no API key configured" not in server.stdout


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--max-body", "100"], {}, id="flag"),
        pytest.param([], {"PETSTORE_MAX_BODY": "100"}, id="env"),
        pytest.param(["--max-body", "100"], {"PETSTORE_MAX_BODY": "50"}, id="flag-wins"),
    ],
)
def test_max_body_is_the_configured_size(
    start_server: ServerFactory, args: list[str], env: dict[str, str]
) -> None:
    """A 100-byte body is created; 101 bytes, declared or chunked, is 413 payload_too_large."""
    server = start_server(*args, env=env)
    json_type = {"Content-Type": "application/json"}
    too_large = {
        "code": "payload_too_large",
        "message": "The body is over the limit of 100 bytes",
        "status": 413,
    }
    with server.client() as http:
        created = http.post("/v1/pets", content=pet_body(100), headers=json_type)
        assert (created.status_code, created.json()) == (
            201,
            {"id": 1, "name": "x" * 74, "categoryId": 1},
        )
        declared = http.post("/v1/pets", content=pet_body(101), headers=json_type)
        assert (declared.status_code, declared.json()) == (413, too_large)
        chunked = http.post("/v1/pets", content=iter([pet_body(101)]), headers=json_type)
        assert (chunked.status_code, chunked.json()) == (413, too_large)
        assert http.get("/v1/pets").json() == [{"id": 1, "name": "x" * 74, "categoryId": 1}]


@pytest.mark.parametrize(
    ("args", "env", "prefix"),
    [
        pytest.param(["--root-path", "/api"], {}, "/api", id="flag"),
        pytest.param([], {"PETSTORE_ROOT_PATH": "/api"}, "/api", id="env"),
        pytest.param(
            ["--root-path", "/edge"], {"PETSTORE_ROOT_PATH": "/api"}, "/edge", id="flag-wins"
        ),
    ],
)
def test_root_path_prefixes_every_link(
    start_server: ServerFactory, args: list[str], env: dict[str, str], prefix: str
) -> None:
    """Behind a proxy that strips the root path, Location and Link carry it."""
    server = start_server(*args, env=env)
    with server.client() as http:
        created = http.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
        assert (created.status_code, created.headers["location"]) == (201, f"{prefix}/v1/pets/1")
        http.post("/v1/pets", json={"name": "Tom", "categoryId": 2})
        page = http.get("/v1/pets", params={"limit": "1"})
        assert (page.status_code, page.headers["link"]) == (
            200,
            f'<{prefix}/v1/pets?limit=1&after=1>; rel="next"',
        )
        fetched = http.get("/v1/pets/1")
        assert (fetched.status_code, fetched.headers["link"]) == (
            200,
            f'<{prefix}/v1/pets>; rel="successor-version"',
        )
        document = http.get("/v1/openapi.json").json()
        assert document["servers"] == [{"url": f"{prefix}/v1"}]


@pytest.mark.parametrize(
    ("args", "env", "logged"),
    [
        pytest.param([], {}, True, id="default-info"),
        pytest.param(["--log-level", "warning"], {}, False, id="flag"),
        pytest.param([], {"PETSTORE_LOG_LEVEL": "warning"}, False, id="env"),
        pytest.param(
            ["--log-level", "info"], {"PETSTORE_LOG_LEVEL": "warning"}, True, id="flag-wins-info"
        ),
        pytest.param(
            ["--log-level", "warning"],
            {"PETSTORE_LOG_LEVEL": "debug"},
            False,
            id="flag-wins-warning",
        ),
    ],
)
def test_log_level_warning_silences_the_access_log(
    start_server: ServerFactory, args: list[str], env: dict[str, str], logged: bool
) -> None:
    """At `warning` neither access-log lines nor INFO lines are written; at `info` both are."""
    server = start_server(*args, env=env)
    with server.client() as http:
        assert http.get("/v1/pets").status_code == 200
    assert server.stop() in (0, -15)  # the access log is flushed on the way out
    assert bool(ACCESS_LINE.search(server.stdout)) is logged, server.stdout
    assert ("INFO:" in server.stderr) is logged, server.stderr


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--data", "{data}"], {}, id="flag"),
        pytest.param([], {"PETSTORE_DATA": "{data}"}, id="env"),
        pytest.param(["--data", "{data}"], {"PETSTORE_DATA": "{other}"}, id="flag-wins"),
    ],
)
def test_data_file_keeps_pets_across_a_restart(
    start_server: ServerFactory, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """Pets created with a data file come back after a restart on the same file."""
    data, other = tmp_path / "pets.jsonl", tmp_path / "other.jsonl"
    args, env = fill(args, env, {"data": data, "other": other})
    server = start_server(*args, env=env)
    with server.client() as http:
        created = http.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
        assert created.status_code == 201, created.text
    assert server.stop() in (0, -15)
    assert not other.exists()
    restarted = start_server("--data", str(data))
    with restarted.client() as http:
        assert http.get("/v1/pets").json() == [{"id": 1, "name": "Rex", "categoryId": 1}]


SEED = [
    {"id": 1, "name": "Rex", "categoryId": 1, "status": "available"},
    {"id": 2, "name": "Tom", "categoryId": 2},
]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--seed", "{seed}"], {}, id="flag"),
        pytest.param([], {"PETSTORE_SEED": "{seed}"}, id="env"),
        pytest.param(["--seed", "{seed}"], {"PETSTORE_SEED": "{other}"}, id="flag-wins"),
    ],
)
def test_seed_file_fills_the_empty_store(
    start_server: ServerFactory, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """The pets of the seed file are served, and new ids follow theirs."""
    seed, other = tmp_path / "seed.json", tmp_path / "other-seed.json"
    seed.write_text(json.dumps(SEED))
    other.write_text(json.dumps([{"id": 1, "name": "Other", "categoryId": 9}]))
    args, env = fill(args, env, {"seed": seed, "other": other})
    server = start_server(*args, env=env)
    with server.client() as http:
        assert http.get("/v1/pets").json() == SEED
        created = http.post("/v1/pets", json={"name": "Kit", "categoryId": 3})
        assert (created.status_code, created.json()) == (
            201,
            {"id": 3, "name": "Kit", "categoryId": 3},
        )


# --------------------------------------------------------------------------- the generated key


def test_without_a_key_a_generated_one_is_printed_once_and_alone_accepted(
    start_server: ServerFactory,
) -> None:
    """No key configured: one random key, printed once on stdout, is the only one accepted."""
    server = start_server(key=None)
    match = GENERATED_KEY_LINE.fullmatch(server.stdout.splitlines()[0])
    assert match, server.stdout
    key = match["key"]
    assert len(key) >= 32
    with server.client() as http:
        listed = http.get("/v1/pets", headers=bearer(key))
        assert (listed.status_code, listed.json()) == (200, [])
        created = http.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=bearer(key))
        assert created.status_code == 201
        wrong = http.get("/v1/pets", headers=bearer(KEY))
        assert (wrong.status_code, wrong.json()) == (401, WRONG_KEY)
        assert wrong.headers["www-authenticate"] == REFUSED_KEY_CHALLENGE
        missing = http.get("/v1/pets")
        assert (missing.status_code, missing.json()) == (401, MISSING_KEY)
        assert missing.headers["www-authenticate"] == PLAIN_CHALLENGE
    assert server.stop() in (0, -15)
    assert (server.stdout + server.stderr).count(key) == 1
    assert ACCESS_LINE.search(server.stdout), server.stdout  # the access log was on

    second = start_server(key=None)
    match = GENERATED_KEY_LINE.fullmatch(second.stdout.splitlines()[0])
    assert match, second.stdout
    assert match["key"] != key


# --------------------------------------------------------------------------- bad settings

BAD_SETTINGS = [
    pytest.param(["--bogus"], {}, id="unknown-flag"),
    pytest.param(["--port"], {}, id="flag-without-value"),
    pytest.param(["--port", "abc"], {}, id="port-not-a-number"),
    pytest.param(["--port", "70000"], {}, id="port-out-of-range"),
    pytest.param([], {"PETSTORE_PORT": "x"}, id="env-port-not-a-number"),
    pytest.param(["--max-body", "0"], {}, id="max-body-zero"),
    pytest.param(["--max-body", "-5"], {}, id="max-body-negative"),
    pytest.param([], {"PETSTORE_MAX_BODY": "lots"}, id="env-max-body"),
    pytest.param(["--log-level", "loud"], {}, id="log-level"),
    pytest.param([], {"PETSTORE_LOG_LEVEL": "loud"}, id="env-log-level"),
    pytest.param(["--root-path", "api/"], {}, id="root-path"),
    pytest.param([], {"PETSTORE_ROOT_PATH": "api/"}, id="env-root-path"),
    pytest.param(["--api-key-file", "/nonexistent"], {}, id="missing-key-file"),
    pytest.param([], {"PETSTORE_API_KEYS_FILE": "/nonexistent"}, id="env-missing-key-file"),
    pytest.param(["--api-key-file", "{empty}"], {}, id="empty-key-file"),
    pytest.param(["--api-key", "has space"], {}, id="key-with-space"),
    pytest.param([], {"PETSTORE_API_KEYS": ",,"}, id="env-keys-empty"),
    pytest.param(["--client-timeout", "0"], {}, id="client-timeout-zero"),
]


@pytest.mark.parametrize(("args", "env"), BAD_SETTINGS)
def test_bad_setting_stops_the_start_with_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """A bad setting: one `petstore: ` line on stderr, nothing on stdout, a non-zero exit."""
    empty = tmp_path / "empty.keys"
    empty.write_text("")
    args, env = fill(args, env, {"empty": empty})
    # The port comes from the environment so that a case can still override it.
    result = subprocess.run(
        [sys.executable, "app.py", *args],
        env=environment({"PETSTORE_PORT": str(free_port()), **env}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("petstore: "), result.stderr
    assert result.stdout == ""


# --------------------------------------------------------------------------- SIGTERM


def test_sigterm_with_an_idle_keep_alive_connection_exits_promptly(
    start_server: ServerFactory,
) -> None:
    """An idle keep-alive connection does not hold up the exit after SIGTERM."""
    server = start_server()
    with server.client() as http:
        assert http.get("/v1/pets").status_code == 200  # the connection stays in the pool
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(10) in (0, -15)


def test_sigterm_lets_the_request_in_flight_finish(start_server: ServerFactory) -> None:
    """A create whose body is still arriving at SIGTERM gets its 201; then the process exits."""
    server = start_server()
    body = b'{"name":"Rex","categoryId":1}'
    head = (
        "POST /v1/pets HTTP/1.1\r\nHost: petstore\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head)
        interim = b""
        while not interim.endswith(b"\r\n\r\n"):  # the app is now waiting for the body
            interim += sock.recv(1)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        server.process.send_signal(signal.SIGTERM)
        wait_until(lambda: not answers(server.base_url), "the listener closes")
        sock.sendall(body)
        status_line, headers, created = parse_response(read_until_closed(sock))
    assert (status_line, created) == (
        "HTTP/1.1 201 Created",
        {"id": 1, "name": "Rex", "categoryId": 1},
    )
    assert (headers["location"], headers["connection"]) == ("/v1/pets/1", "close")
    assert server.process.wait(10) in (0, -15)


# --------------------------------------------------------------------------- the access log


def test_access_log_has_method_path_status_duration_and_no_secret(
    start_server: ServerFactory,
) -> None:
    """One line a request (method, path, status, duration), flushed soon; never a key."""
    server = start_server()
    with server.client() as http:
        http.get("/v1/pets")
        http.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
        http.get("/v1/nowhere")
        http.get("/v1/pets", headers=bearer(OTHER_KEY))
        http.get("/v1/pets/1")
    out = server.wait_for_output('"GET /v1/pets/1" 200 ', timeout=2)
    for method, path, status in [
        ("GET", "/v1/pets", 200),
        ("POST", "/v1/pets", 201),
        ("GET", "/v1/nowhere", 404),
        ("GET", "/v1/pets", 401),
        ("GET", "/v1/pets/1", 200),
    ]:
        line = rf'^127\.0\.0\.1 "{method} {re.escape(path)}" {status} \d+us$'
        assert re.search(line, out, re.MULTILINE), (line, out)
    assert server.stop() in (0, -15)
    everything = server.stdout + server.stderr
    for secret in (KEY, OTHER_KEY, "Bearer", "authorization", "Authorization"):
        assert secret not in everything, everything


# --------------------------------------------------------------------------- stalled clients

POST_HEAD = (
    f"POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
).encode()


@pytest.mark.parametrize(
    ("args", "env", "sent"),
    [
        pytest.param(
            ["--client-timeout", "1"],
            {},
            b"GET /v1/pets HTTP/1.1\r\nHost: x\r\n",
            id="partial-head",
        ),
        pytest.param(["--client-timeout", "1"], {}, POST_HEAD + b"0123456789", id="stalled-body"),
        pytest.param(["--client-timeout", "1"], {}, b"", id="nothing-sent"),
        pytest.param([], {"PETSTORE_CLIENT_TIMEOUT": "1"}, b"", id="nothing-sent-env-timeout"),
    ],
)
def test_stalled_client_is_cut_off(
    start_server: ServerFactory, args: list[str], env: dict[str, str], sent: bytes
) -> None:
    """A connection stalled in its head or body is closed after the client timeout."""
    server = start_server(*args, env=env)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(sent)
        assert read_until_closed(sock) == b""
        elapsed = time.monotonic() - started
    assert 0.9 <= elapsed < 5


def test_slowloris_load_does_not_stop_the_service_answering(start_server: ServerFactory) -> None:
    """With 50 connections stalled in their request head, another client is answered at once."""
    server = start_server("--client-timeout", "3")
    stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(50)]
    try:
        for sock in stalled:
            sock.sendall(b"GET /v1/pets HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        with server.client() as http:
            response = http.get("/v1/pets")
        assert (response.status_code, response.json()) == (200, [])
        for sock in stalled:  # still open while the other client was served
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
            sock.settimeout(5)
        assert [read_until_closed(sock) for sock in stalled] == [b""] * 50
    finally:
        for sock in stalled:
            sock.close()


# --------------------------------------------------------------------------- uvicorn app:app


def test_uvicorn_app_reads_the_environment(launch: Launcher) -> None:
    """`uvicorn app:app` serves with the keys and root path of the PETSTORE_* variables."""
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)],
        {"PETSTORE_API_KEYS": "uvicorn-a,uvicorn-b", "PETSTORE_ROOT_PATH": "/api"},
        port,
    )
    server.wait_ready()
    with server.client() as http:
        created = http.post(
            "/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=bearer("uvicorn-b")
        )
        assert (created.status_code, created.headers["location"], created.json()) == (
            201,
            "/api/v1/pets/1",
            {"id": 1, "name": "Rex", "categoryId": 1},
        )
        listed = http.get("/v1/pets", headers=bearer("uvicorn-a"))
        assert (listed.status_code, listed.json()) == (200, [created.json()])
        refused = http.get("/v1/pets", headers=bearer(KEY))
        assert (refused.status_code, refused.json()) == (401, WRONG_KEY)
    assert server.stop() in (0, -15)
    assert "uvicorn-a" not in server.stdout + server.stderr


WORKERS_REFUSED = (
    "petstore: several workers would each keep their own in-memory pets: run one worker"
)


def test_uvicorn_with_two_workers_over_memory_says_why_it_is_refused(launch: Launcher) -> None:
    """`uvicorn app:app --workers 2` without a data file prints a clear refusal."""
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2"],
        {"PETSTORE_API_KEYS": "k"},
        port,
    )
    wait_until(lambda: WORKERS_REFUSED in server.stderr.splitlines(), "the refusal")
    assert not answers(server.base_url)


def test_uvicorn_with_two_workers_over_memory_is_refused_and_stops(launch: Launcher) -> None:
    """Several workers over memory: each says why and the whole start stops, no restart loop."""
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2"],
        {"PETSTORE_API_KEYS": "k"},
        port,
    )
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        lines = server.stderr.splitlines()
        raise AssertionError(
            f"still running after 10 s, {lines.count(WORKERS_REFUSED)} refusals so far; "
            "stderr starts:\n" + "\n".join(lines[:12])
        ) from None
    lines = server.stderr.splitlines()
    assert 1 <= lines.count(WORKERS_REFUSED) <= 2  # once a worker, never restarted
    assert any("failed to start, stopping the parent process" in line for line in lines)


# --------------------------------------------------------------------------- probes


@pytest.mark.parametrize(
    ("path", "body"),
    [("/healthz", {"status": "ok"}), ("/readyz", {"status": "ready"})],
)
def test_probe_answers_200_without_credential(
    start_server: ServerFactory, path: str, body: dict[str, str]
) -> None:
    """/healthz and /readyz need no credential."""
    server = start_server()
    response = httpx.get(f"{server.base_url}{path}", timeout=5)
    assert (response.status_code, response.headers["content-type"], response.json()) == (
        200,
        "application/json",
        body,
    )
