"""The server on the real process: SIGTERM, the access log, stalled clients, `uvicorn app:app`,
and the probes."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tests.conftest import (
    KEY,
    WRONG_KEY,
    Launcher,
    ServerFactory,
    answers,
    bearer,
    free_port,
    wait_until,
)

OTHER_KEY = "other-key-9876543210"


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
