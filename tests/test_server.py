"""The server on the real process: SIGTERM, the access log, `uvicorn app:app`, the probes and the
ready line."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.types import Message, Scope

from app import Petstore
from server import Server
from tests.conftest import (
    KEY,
    ROOT,
    STRACE,
    WRONG_KEY,
    Launcher,
    ServerFactory,
    answers,
    bearer,
    child_of,
    environment,
    free_port,
    read_until_closed,
    serving,
    wait_until,
)
from tests.conftest import Server as Running

OTHER_KEY = "other-key-9876543210"
ADMIN_KEY = "admin-key-0123456789"
ADMIN = bearer(ADMIN_KEY)
AUTH_LINE = b"Authorization: Bearer %s\r\n" % KEY.encode()
# How a process stopped by SIGTERM may end: 0, or killed by the signal uvicorn raises again.
STOPPED = (0, -signal.SIGTERM)


def parse_response(raw: bytes) -> tuple[str, dict[str, str], Any]:
    """The status line, headers (lower-case names) and JSON body of one raw HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status_line, headers, json.loads(body)


def finished(
    argv: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """ARGV run in the project directory with ENV (no other PETSTORE_* variable) to its end."""
    return subprocess.run(
        argv,
        env=environment(env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


# --------------------------------------------------------------------------- SIGTERM


def test_ctrl_c_stops_gracefully_like_sigterm(start_server: ServerFactory) -> None:
    """SIGINT (Ctrl-C) stops gracefully like SIGTERM: the lifespan's end runs."""
    server = start_server()
    with server.client() as http:
        assert http.get("/healthz").status_code == 200
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(15) in (0, -signal.SIGINT)
    assert "Application shutdown complete" in server.stderr


def test_sigterm_with_an_idle_keep_alive_connection_exits_promptly(
    start_server: ServerFactory,
) -> None:
    """An idle keep-alive connection does not hold up the exit after SIGTERM."""
    server = start_server()
    with server.client() as http:
        assert http.get("/v1/pets").status_code == 200  # the connection stays in the pool
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(10) in STOPPED


def test_sigterm_stops_new_connections_and_lets_the_request_in_flight_finish(
    start_server: ServerFactory,
) -> None:
    """From a SIGTERM on no new connection is taken; a create whose body is still arriving gets
    its 201, then the process exits."""
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
        with pytest.raises(ConnectionRefusedError):  # the create holds the process up
            socket.create_connection(("127.0.0.1", server.port), timeout=10).close()
        assert server.process.poll() is None
        sock.sendall(body)
        status_line, headers, created = parse_response(read_until_closed(sock))
    assert (status_line, created) == (
        "HTTP/1.1 201 Created",
        {"id": 1, "name": "Rex", "categoryId": 1},
    )
    assert (headers["location"], headers["connection"]) == ("/v1/pets/1", "close")
    assert server.process.wait(10) in STOPPED


@pytest.mark.anyio
async def test_a_sigterm_makes_readyz_503_at_once(app: Petstore) -> None:
    """The server's SIGTERM handler turns /readyz to 503 before anything else is stopped."""
    # The process itself closes its listeners a moment later, so a probe could only catch the 503
    # by chance; here the handler is called as the signal calls it.
    async with serving(app) as client:
        ready = await client.get("/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        server = Server(uvicorn.Config(app.app), app.health.stop, "")
        server.handle_exit(signal.SIGTERM, None)
        stopping = await client.get("/readyz")
    assert server.should_exit
    assert (stopping.status_code, stopping.headers["content-type"], stopping.json()) == (
        503,
        "application/json",
        {"code": "storage_unavailable", "message": "Shutting down", "status": 503},
    )


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
    out = server.wait_for_output('"GET /v1/pets/1" 200 ')
    for method, path, status in [
        ("GET", "/v1/pets", 200),
        ("POST", "/v1/pets", 201),
        ("GET", "/v1/nowhere", 404),
        ("GET", "/v1/pets", 401),
        ("GET", "/v1/pets/1", 200),
    ]:
        line = rf'^127\.0\.0\.1 "{method} {re.escape(path)}" {status} \d+us \S+$'
        assert re.search(line, out, re.MULTILINE), (line, out)
    assert server.stop() in STOPPED
    everything = server.stdout + server.stderr
    for secret in (KEY, OTHER_KEY, "Bearer", "authorization", "Authorization"):
        assert secret not in everything, everything


# --------------------------------------------------------------------------- refused creates

POST_HEAD = (
    f"POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
).encode()


def test_a_refused_create_waiting_for_100_continue_is_answered_at_once(
    start_server: ServerFactory,
) -> None:
    """A refused create waiting for its `100 Continue` is answered at once, journaled bodiless."""
    # With the plane on, a create refused before its body is read gets no `100 Continue`: a client
    # that waits for it before sending the body gets the answer.
    server = start_server("--admin-key", ADMIN_KEY)
    expecting = POST_HEAD.replace(b"Content-Length:", b"Expect: 100-continue\r\nContent-Length:")
    for head, status in (
        (expecting.replace(b"application/json", b"text/plain"), b"415"),
        (expecting.replace(b"Expect:", b"Prefer: code=503\r\nExpect:"), b"503"),
    ):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(head)
            assert sock.recv(65536).startswith(b"HTTP/1.1 %b " % status)
    with server.client() as http:
        journal = http.get("/_admin/requests", headers=ADMIN).json()["requests"]
    assert [(entry["status"], "body" in entry) for entry in journal] == [(415, False), (503, False)]


def test_a_refused_create_declared_over_the_limit_is_answered_at_once(
    start_server: ServerFactory,
) -> None:
    """A refused create whose Content-Length is over the limit is answered at once, bodiless."""
    # The client sent a piece of its body and waits for the answer, as the 413 lets it.
    server = start_server("--admin-key", ADMIN_KEY, "--max-body", "1000")
    over = POST_HEAD.replace(b"Content-Length: 100", b"Content-Length: 2000") + b'{"name":'
    for head, status in (
        (over.replace(b"application/json", b"text/plain"), b"415"),
        (over.replace(b"Content-Length:", b"Prefer: code=503\r\nContent-Length:"), b"503"),
        (over, b"413"),
    ):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(head)
            assert sock.recv(65536).startswith(b"HTTP/1.1 %b " % status)  # one write
    with server.client() as http:
        journal = http.get("/_admin/requests", headers=ADMIN).json()["requests"]
    assert [(entry["status"], "body" in entry) for entry in journal] == [
        (415, False),
        (503, False),
        (413, False),
    ]


def test_a_client_that_sends_a_whole_body_before_reading_gets_the_413(
    start_server: ServerFactory,
) -> None:
    """A client that sends a too-large body whole before reading gets its 413 Error, no reset."""
    # Python's http.client sends a body whole, then reads. A connection closed with the body unread
    # makes the kernel answer it with a reset, which can overtake the answer.
    server = start_server("--max-body", "1024")
    too_large = {
        "code": "payload_too_large",
        "message": "The body is over the limit of 1024 bytes",
        "status": 413,
    }
    for _ in range(3):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        headers = {**server.headers, "Content-Type": "application/json"}
        connection.request("POST", "/v1/pets", body=b"x" * 5_000_000, headers=headers)
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())) == (413, too_large)
        connection.close()
    with server.client() as client:
        assert client.get("/v1/pets").json() == []


# --------------------------------------------------------------------------- clients gone


def large_answers_unread(server: Running, pets: int, name: int, requests: int) -> socket.socket:
    """A connection that pipelines `requests` listPets of `pets` pets (names of about `name`
    characters) made now, and reads none of the answers (a 2 KiB receive buffer)."""
    with server.client() as http:
        for number in range(pets):
            http.post("/v1/pets", json={"name": f"{number}" * name, "categoryId": 1})
    request = (
        f"GET /v1/pets?limit={pets} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    )
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(request.encode() * requests)
    return sock


def test_an_answer_cut_off_by_the_shutdown_mid_write_holds_up_no_exit(
    start_server: ServerFactory,
) -> None:
    """An answer cut off mid-write by the shutdown: the process still exits, in a few seconds."""
    # Large answers held by a client that reads none of them, when SIGTERM's grace runs out: the one
    # being written is cancelled mid-answer (uvicorn logs the cancellation).
    server = start_server()
    # 20 answers of 400 KB: past what the kernel's buffers hold
    with large_answers_unread(server, pets=100, name=2000, requests=20):
        wait_until(lambda: '"GET /v1/pets" 200' in server.stdout, "the first answered")
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(15) in STOPPED
    assert "timeout graceful shutdown exceeded" in server.stderr


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
    assert server.stop() in STOPPED
    assert "uvicorn-a" not in server.stdout + server.stderr


def test_uvicorn_app_s_json_log_keeps_its_last_lines() -> None:
    """Under `uvicorn app:app` with JSON logs, every line is JSON, and the lines at a SIGTERM are
    all written, the last one uvicorn's "Finished server process"."""
    # Read through a pipe, as a container's runtime reads it.
    port = free_port()
    env = environment({"PETSTORE_API_KEYS": KEY, "PETSTORE_LOG_FORMAT": "json"})
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    with subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            wait_until(lambda: answers(f"http://127.0.0.1:{port}"), "the service answers")
            listed = httpx.get(f"http://127.0.0.1:{port}/v1/pets", headers=bearer(KEY))
            assert listed.status_code == 200
            process.send_signal(signal.SIGTERM)
            stdout, stderr = process.communicate(timeout=10)
        finally:
            process.kill()
    assert process.returncode in STOPPED
    messages = [json.loads(line)["message"] for line in stderr.splitlines()]
    assert messages[-3:] == [
        "Waiting for application shutdown.",
        "Application shutdown complete.",
        f"Finished server process [{process.pid}]",
    ], messages
    assert '"path":"/v1/pets"' in stdout


WORKERS_REFUSED = "petstore: several workers "


@pytest.mark.parametrize(
    "env",
    [
        {"PETSTORE_API_KEYS": KEY},
        {},
        {"PETSTORE_API_KEYS": KEY, "PETSTORE_ADMIN_KEYS": ADMIN_KEY},
    ],
    ids=["memory", "no-key", "admin-key"],
)
def test_uvicorn_with_two_workers_says_why_it_is_refused(
    launch: Launcher, env: dict[str, str]
) -> None:
    """Several workers over memory, with no key (each would make its own) or with the plane (each
    would keep its own rules and journal) are refused, saying why; no key is shown."""
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2"],
        env,
        port,
    )
    wait_until(
        lambda: any(line.startswith(WORKERS_REFUSED) for line in server.stderr.splitlines()),
        "the refusal",
    )
    assert "this run accepts" not in server.stdout
    assert not answers(server.base_url)


def test_uvicorn_with_two_workers_over_memory_is_refused_and_stops(launch: Launcher) -> None:
    """Several workers over memory: each says why and the whole start stops, no restart loop."""
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2"],
        {"PETSTORE_API_KEYS": KEY},
        port,
    )
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        lines = server.stderr.splitlines()
        raise AssertionError(
            "still running after 10 s; stderr starts:\n" + "\n".join(lines[:12])
        ) from None
    lines = server.stderr.splitlines()
    refusals = [line for line in lines if line.startswith(WORKERS_REFUSED)]
    assert 1 <= len(refusals) <= 2, lines  # once a worker, never restarted
    assert any("failed to start, stopping the parent process" in line for line in lines), lines


def test_each_worker_refuses_in_one_write(tmp_path: Path) -> None:
    """Each worker's refusal goes out on the shared stderr as one write, the line with its end."""
    # Two writes of a line and its end let two workers' lines come out as one line and an empty one.
    trace = tmp_path / "writes.trace"
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(free_port())]
    subprocess.run(
        [
            STRACE,
            "-f",
            "-qq",
            "-e",
            "trace=write",
            "-s",
            "300",
            "-o",
            str(trace),
            *argv,
            "--workers",
            "2",
        ],
        env=environment({"PETSTORE_API_KEYS": KEY, "PYTHONUNBUFFERED": "1"}),
        cwd=ROOT,
        capture_output=True,
        timeout=30,
        check=False,
    )
    refusals = [line for line in trace.read_text().splitlines() if "several workers" in line]
    assert refusals, trace.read_text()[-2000:]
    whole = re.compile(rf'write\(2, "{WORKERS_REFUSED}[^"]*\\n", ')
    assert all(whole.search(line) for line in refusals), refusals


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


# --------------------------------------------------------------------------- the ready line

READY_LINE = re.compile(
    r"petstore: ready at http://(?P<host>\[[0-9a-f:]+\]|[0-9.]+):(?P<port>\d+)/v1"
)


def can_bind(host: str) -> bool:
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


# IPv6 where the machine has it (a property of the machine, not a package to install).
HOSTS = ["127.0.0.1", *(["::1"] if can_bind("::1") else [])]


@pytest.mark.parametrize("host", HOSTS)
def test_port_0_prints_one_ready_line_with_the_bound_address(launch: Launcher, host: str) -> None:
    """--port 0: one ready line names the bound address and port, and the service answers there."""
    # The system picks the port; IPv6 in brackets; the line comes before any access-log line.
    server = launch(
        [sys.executable, "app.py", "--port", "0", "--host", host, "--api-key", KEY], {}, 0
    )
    out = server.wait_for_output("petstore: ready at ")
    ready = READY_LINE.search(out)
    assert ready, out
    expected_host = f"[{host}]" if ":" in host else host
    assert ready["host"] == expected_host
    server.port = int(ready["port"])
    assert server.port != 0
    url = f"http://{expected_host}:{server.port}"
    assert httpx.get(f"{url}/v1/pets", headers=bearer(KEY)).json() == []
    lines = server.wait_for_output('"GET /v1/pets" 200').splitlines()
    assert lines[0] == ready[0]
    assert [line for line in lines if line.startswith("petstore: ready")] == [ready[0]]


def test_the_ready_line_comes_once_the_store_is_loaded(launch: Launcher, tmp_path: Path) -> None:
    """The first requests after the ready line find every seeded pet and a ready service."""
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{"name": f"pet {n}", "categoryId": 1} for n in range(20_000)]))
    argv = [sys.executable, "app.py", "--port", "0", "--seed", str(seed), "--api-key", KEY]
    server = launch(argv, {}, 0)
    ready = READY_LINE.search(server.wait_for_output("petstore: ready at "))
    assert ready, server.stdout
    url = f"http://127.0.0.1:{ready['port']}"
    assert httpx.get(f"{url}/readyz").status_code == 200
    last = httpx.get(f"{url}/v1/pets/20000", headers=bearer(KEY))
    assert (last.status_code, last.json()) == (
        200,
        {"id": 20000, "name": "pet 19999", "categoryId": 1},
    )


def test_the_key_and_ready_lines_go_out_in_one_write(tmp_path: Path) -> None:
    """The generated key's line and the ready line go out in one write, once the service listens."""
    # Under PYTHONUNBUFFERED (the image sets it) a line and its end written apart let another
    # writer's line come in between.
    trace = tmp_path / "stdout.trace"
    port = free_port()
    strace = [STRACE, "-f", "-qq", "-e", "trace=write", "-s", "500", "-o", str(trace)]
    process = subprocess.Popen(
        [*strace, sys.executable, "app.py", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=environment({"PYTHONUNBUFFERED": "1"}),
        cwd=ROOT,
    )
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}"), "the service answers", 30)
    finally:
        if process.poll() is None:
            try:
                os.kill(child_of(process.pid), signal.SIGTERM)  # strace ends with the service
            except AssertionError:  # no service under strace (it never started): strace itself
                process.kill()
        process.wait(15)
    ours = [line for line in trace.read_text().splitlines() if 'write(1, "petstore: ' in line]
    assert len(ours) == 1, ours
    assert re.search(
        r'write\(1, "petstore: no API key configured; this run accepts: Bearer [\w-]+\\n'
        rf'petstore: ready at http://127\.0\.0\.1:{port}/v1\\n", \d+[) ]',
        ours[0],
    ), ours


# --------------------------------------------------------------------------- starts refused


def test_a_start_that_fails_shows_no_generated_key() -> None:
    """A start that fails shows no generated key: the key is shown once the service listens."""
    # Here, a port in use.
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = finished([sys.executable, "app.py", "--port", str(port)])
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"petstore: cannot listen on 127.0.0.1:{port}: ")


@pytest.mark.parametrize(
    ("host", "refusal"),
    [
        ("127.0.0.1", "cannot listen on 127.0.0.1:{port}: Address already in use"),
        ("no.such.host.invalid", "cannot listen on no.such.host.invalid:{port}: "),
        ("192.0.2.1", "cannot listen on 192.0.2.1:{port}: Cannot assign requested address"),
    ],
    ids=["port-in-use", "unknown-host", "address-not-ours"],
)
def test_an_address_the_service_cannot_have_stops_the_start_in_one_line(
    host: str, refusal: str, tmp_path: Path
) -> None:
    """An address the service can't have: one line and exit 2, before the store is loaded."""
    # A port in use, a host that doesn't resolve or isn't this machine's: as a bad setting; the data
    # file is not even made.
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        data = tmp_path / "pets.jsonl"
        result = finished(
            [sys.executable, "app.py", "--host", host, "--port", str(port), "--data", str(data)],
            {"PETSTORE_API_KEYS": KEY},
        )
    assert result.returncode == 2
    assert result.stderr.startswith(f"petstore: {refusal.format(port=port)}")
    assert len(result.stderr.splitlines()) == 1
    assert not data.exists()


# --------------------------------------------------------------------------- the app alone


@pytest.mark.anyio
async def test_a_websocket_under_another_server_is_closed_not_failed(app: Petstore) -> None:
    """A WebSocket handed to the app is closed before it is accepted, whatever its path: no 500."""
    # Under a server that hands WebSockets to the app: uvicorn app:app, whose default is to.
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    for path in ("/v1/pets", "/nowhere"):
        scope: Scope = {
            "type": "websocket",
            "path": path,
            "root_path": "",
            "headers": [],
            "query_string": b"",
        }
        await app(scope, receive, send)
    assert [message["type"] for message in sent] == ["websocket.close", "websocket.close"]
