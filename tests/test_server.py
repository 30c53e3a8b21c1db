"""The server on the real process: SIGTERM, the access log, stalled clients, `uvicorn app:app`,
and the probes."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Message, Scope

from app import Petstore
from protocol import http_protocol
from routing import cut_off
from settings import Settings
from tests.conftest import (
    KEY,
    ROOT,
    STRACE,
    WRONG_KEY,
    Launcher,
    Server,
    ServerFactory,
    TracedFactory,
    answers,
    bearer,
    child_of,
    environment,
    free_port,
    wait_until,
)
from tests.test_control_plane import ADMIN, ADMIN_KEY

OTHER_KEY = "other-key-9876543210"
AUTH_LINE = b"Authorization: Bearer %s\r\n" % KEY.encode()


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

CUT_OFF = "The service stopped before this request was answered; it may be retried"


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


def waiting_request(headers: str = "") -> bytes:
    """A listPets that waits 30 s in the app (`Prefer: delay=`: the plane must be on), with
    these header lines too."""
    return (
        "GET /v1/pets HTTP/1.1\r\nHost: petstore\r\nPrefer: delay=30000\r\n"
        f"Authorization: Bearer {KEY}\r\n{headers}\r\n"
    ).encode()


def test_ctrl_c_stops_like_sigterm_without_a_traceback(start_server: ServerFactory) -> None:
    """SIGINT (Ctrl-C) stops gracefully like SIGTERM, exit 130, with no traceback."""
    # Exit 130 as a shell reports it; uvicorn raises the signal again once it has stopped.
    server = start_server()
    with server.client() as http:
        assert http.get("/healthz").status_code == 200
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(15) == 130
    assert "Traceback" not in server.stderr
    assert "Application shutdown complete" in server.stderr


def test_ctrl_c_twice_cuts_off_the_requests_in_flight_and_still_closes_the_store(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    """A second Ctrl-C cuts off requests in flight with a 500 and still closes the store."""
    # A second Ctrl-C while requests are in flight (uvicorn's force quit) stops waiting for them:
    # each is answered the cut-off 500; exit 130. The store is still closed by the lifespan's end,
    # which uvicorn skipped and asyncio.run then cancelled with a traceback.
    data = tmp_path / "pets.jsonl"
    server = start_server(
        "--admin-key", "admin-key-0123456789", "--data", str(data), "--log-level", "trace"
    )
    with server.client() as http:
        assert http.post("/v1/pets", json={"name": "Rex", "categoryId": 1}).status_code == 201
    began = server.stderr.count("Started scope=")
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(waiting_request())
        # uvicorn's trace of the app called: the request is waiting out its delay
        wait_until(lambda: server.stderr.count("Started scope=") > began, "the request in the app")
        server.process.send_signal(signal.SIGINT)
        wait_until(lambda: "Waiting for connections to close" in server.stderr, "the first stop")
        server.process.send_signal(signal.SIGINT)
        status_line, _, body = parse_response(read_until_closed(sock))
    assert server.process.wait(10) == 130
    assert status_line == "HTTP/1.1 500 Internal Server Error"
    assert body["message"] == CUT_OFF
    assert server.stderr.count("Application shutdown complete.") == 1
    assert "Traceback" not in server.stderr
    assert '"GET /v1/pets" 500 ' in server.stdout  # cut off before the log's last lines
    restarted = start_server("--data", str(data))  # the data file's lock was let go, its pet kept
    with restarted.client() as http:
        assert [pet["name"] for pet in http.get("/v1/pets").json()] == ["Rex"]


def test_sigterm_with_an_idle_keep_alive_connection_exits_promptly(
    start_server: ServerFactory,
) -> None:
    """An idle keep-alive connection does not hold up the exit after SIGTERM."""
    server = start_server()
    with server.client() as http:
        assert http.get("/v1/pets").status_code == 200  # the connection stays in the pool
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(10) == 0


def test_a_sigterm_during_the_start_stops_it_before_serving(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    """A SIGTERM during the start is acted on once the start is done: nothing served, exit 0."""
    # The SIGTERM comes while the store loads (here its seed: a FIFO nobody has written yet). In the
    # image Python is PID 1, and the kernel drops a SIGTERM that finds no handler: app.py takes it
    # from its first lines.
    fifo = tmp_path / "seed.json"
    os.mkfifo(fifo)
    server = start_server("--seed", str(fifo), wait=False)
    writer = None
    deadline = time.monotonic() + 15
    while writer is None:  # a writer opens a FIFO once its reader, the start, is there
        assert server.process.poll() is None, server.stderr
        assert time.monotonic() < deadline, "the start never opened its seed"
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            time.sleep(0.05)  # a poll interval: the loop checks the condition
    server.process.send_signal(signal.SIGTERM)
    os.write(writer, b"[]")
    os.close(writer)
    assert server.process.wait(15) == 0, server.stderr
    assert "ready at" not in server.stdout
    assert "stopped before serving: a SIGTERM came during the start" in server.stderr


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
    assert server.process.wait(10) == 0


def test_a_request_cut_off_by_the_shutdown_gets_an_error_body(start_server: ServerFactory) -> None:
    """A request cut off by the shutdown gets a 500 Error body with its id; the process exits."""
    # A request still unanswered when SIGTERM's 5 s of grace run out is cancelled; uvicorn's own 500
    # is plain text. uvicorn says so in one line; the request's cancellation is no traceback (it
    # wrote 22 lines).
    server = start_server("--admin-key", "admin-key-0123456789", "--log-level", "trace")
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(waiting_request("X-Request-Id: cut-off\r\n"))
        # uvicorn's trace of the app called: the request is waiting out its delay
        wait_until(lambda: "Started scope=" in server.stderr, "the request in the app")
        server.process.send_signal(signal.SIGTERM)
        status_line, headers, body = parse_response(read_until_closed(sock))
    assert status_line == "HTTP/1.1 500 Internal Server Error"
    assert (headers["content-type"], headers["x-request-id"]) == ("application/json", "cut-off")
    assert headers["connection"] == "close"
    assert body == {
        "code": "internal_error",
        "message": CUT_OFF,
        "status": 500,
    }
    assert server.process.wait(10) == 0
    assert "Cancel 1 running task(s), timeout graceful shutdown exceeded" in server.stderr
    assert "Traceback" not in server.stderr
    assert '"GET /v1/pets" 500 ' in server.stdout


def test_a_get_pet_cut_off_by_the_shutdown_keeps_its_headers(start_server: ServerFactory) -> None:
    """A getPet's cut-off 500 carries getPet's deprecation headers and, for an origin, CORS's."""
    # It carries what every getPet answer does (Deprecation, Sunset, the successor Link) and, for a
    # configured origin, CORS's headers, so that a browser's page can read it. It had neither,
    # answered outside the endpoint and Cors.
    origin = "https://app.example"
    server = start_server(
        "--admin-key", "admin-key-0123456789", "--cors-origin", origin, "--log-level", "trace"
    )
    request = (
        "GET /v1/pets/1 HTTP/1.1\r\nHost: petstore\r\nPrefer: delay=30000\r\n"
        f"Authorization: Bearer {KEY}\r\nOrigin: {origin}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(request.encode())
        wait_until(lambda: "Started scope=" in server.stderr, "the request in the app")
        server.process.send_signal(signal.SIGTERM)
        status_line, headers, body = parse_response(read_until_closed(sock))
    assert (status_line, body["message"]) == ("HTTP/1.1 500 Internal Server Error", CUT_OFF)
    assert headers["deprecation"] == "@1767225600"
    assert headers["sunset"] == "Thu, 05 Dec 2030 00:00:00 GMT"
    assert headers["link"] == '</v1/pets>; rel="successor-version"'
    assert headers["access-control-allow-origin"] == origin
    assert server.process.wait(10) == 0


# --------------------------------------------------------------------------- the access log


@pytest.mark.parametrize(
    ("method", "headers", "advice"),
    [
        ("GET", [], "it may be retried"),
        (
            "POST",
            [(b"idempotency-key", b"k-1")],
            "it may have been carried out: retry it with its Idempotency-Key",
        ),
        ("POST", [], "it may have been carried out: look for its result before sending it again"),
    ],
    ids=["a-read", "a-keyed-create", "a-keyless-create"],
)
def test_the_cut_off_500_says_how_to_retry(
    method: str, headers: list[tuple[bytes, bytes]], advice: str
) -> None:
    """The cut-off 500 says how to retry: a create with its key, or looked for; a read as it is."""
    # A create may have been stored when the grace ran out: retried with its key, or, without one,
    # looked for first; a read may be retried as it is.
    response = cut_off({"type": "http", "method": method, "headers": headers})
    assert json.loads(bytes(response.body))["message"] == (
        f"The service stopped before this request was answered; {advice}"
    )


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
        line = rf'^127\.0\.0\.1 "{method} {re.escape(path)}" {status} \d+us \S+$'
        assert re.search(line, out, re.MULTILINE), (line, out)
    assert server.stop() == 0
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


def test_line_breaks_after_an_answer_do_not_keep_a_connection_open(
    start_server: ServerFactory,
) -> None:
    """Line breaks sent after an answer, a request never begun, don't hold a connection open."""
    # llhttp skips them between requests; each read stopped uvicorn's keep-alive timer, and the
    # connection, owing no head, stayed open as long as they came: slowloris with no key.
    server = start_server("--client-timeout", "1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        assert exchange_on(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").startswith(
            b"HTTP/1.1 200 OK\r\n"
        )
        started = time.monotonic()
        closed = False
        while not closed and time.monotonic() - started < 8:
            with contextlib.suppress(OSError):  # a reset once closed
                sock.sendall(b"\r\n")
            closed = bool(select.select([sock], [], [], 0.3)[0]) and sock.recv(10) == b""
        elapsed = time.monotonic() - started
    assert closed
    assert elapsed < 4  # the next check after the answer (1 s), or the one after it


def test_a_body_cut_off_or_left_mid_way_is_noted_as_unanswered(start_server: ServerFactory) -> None:
    """A create cut off mid-body, or whose client left mid-body, is noted as no answer."""
    # Neither gets a byte: `-` in the access log, `dropped` in the metrics, as a fault's drop. Both
    # were noted as the 400 `malformed_json` the app made and no client read.
    server = start_server("--client-timeout", "1")
    for leave in (False, True):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(POST_HEAD + b"0123456789")
            if leave:
                sock.shutdown(socket.SHUT_WR)
            assert read_until_closed(sock) == b""
    with server.client() as http:
        counted = {
            sample.labels["status"]: sample.value
            for family in text_string_to_metric_families(http.get("/metrics").text)
            for sample in family.samples
            if sample.name == "petstore_http_requests_total" and sample.labels["method"] == "POST"
        }
    assert counted == {"dropped": 2}
    wait_until(lambda: server.stdout.count('"POST /v1/pets" - ') == 2, "two lines of no answer")


def test_a_refused_create_waiting_for_100_continue_is_answered_at_once(
    start_server: ServerFactory,
) -> None:
    """A refused create waiting for its `100 Continue` is answered at once, journaled bodiless."""
    # With the plane on, a create refused before its body is read gets no `100 Continue`. Its
    # body was read for the journal: the server sent `100 Continue`, asking the client for what
    # was refused, and a client that waited for the answer got none.
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
    # With the plane on, a refused create's body is read for the journal: one declared past the
    # limit, whose client sent a piece of it and waits for the answer (as the 413 lets it),
    # got none until the client timeout closed the connection.
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


def test_an_answer_before_a_100_continue_closes_the_connection(start_server: ServerFactory) -> None:
    """An answer sent before its body was asked for (`Expect: 100-continue`) closes it."""
    # It was kept open with the body unsent: the client's next request would be read as that body.
    server = start_server()
    head = POST_HEAD.replace(b"Content-Length:", b"Expect: 100-continue\r\nContent-Length:")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head.replace(KEY.encode(), b"not-the-key"))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 401 Unauthorized\r\n")
    assert b"\r\nconnection: close\r\n" in answer


def test_an_expectation_without_a_body_or_from_http_1_0_is_ignored(
    start_server: ServerFactory,
) -> None:
    """`Expect: 100-continue` with no body, or in HTTP/1.0, gets no 100 and no close for it."""
    # A bodiless request's answer closed the connection (the request pipelined behind it went
    # unanswered); an HTTP/1.0 client was sent a 100, which it may take for the answer
    # (RFC 9110 10.1.1: a server ignores an HTTP/1.0 request's expectation).
    server = start_server()
    bodiless = b"GET /v1/pets HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n%s\r\n" % AUTH_LINE
    body = b'{"name":"Rex","categoryId":1}'
    old = (
        b"POST /v1/pets HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n%s"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n%s" % (AUTH_LINE, len(body), body)
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(bodiless + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        pipelined = read_until_closed(sock)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(old)
        created = read_until_closed(sock)
    assert re.findall(rb"HTTP/1.1 (\d+)", pipelined) == [b"200", b"200"]
    assert pipelined.count(b"connection: close") == 1  # the second's, which asked for it
    assert created.startswith(b"HTTP/1.1 201 Created\r\n")
    assert b"100 Continue" not in created


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"application/json", b"text/plain"),
        (b"Content-Length", b"Prefer: code=503\r\nContent-Length"),
    ],
    ids=["415", "injected"],
)
def test_a_refused_create_whose_client_leaves_mid_body_is_noted_as_unanswered(
    start_server: ServerFactory, old: bytes, new: bytes
) -> None:
    """A refused create whose client leaves as its body is read for the journal: no answer."""
    # With the plane on, a 415 or an injected status: read for the journal and gone, it was noted
    # as the status no client read.
    server = start_server("--admin-key", ADMIN_KEY)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(POST_HEAD.replace(old, new) + b"0123456789")
        sock.shutdown(socket.SHUT_WR)
        assert read_until_closed(sock) == b""
    server.wait_for_output('"POST /v1/pets" - ')


def trickle(sock: socket.socket, data: bytes, piece: int, every: float) -> int:
    """Send `data` `piece` bytes at a time, one piece each `every` seconds, until the server
    closes the connection or all is sent: how many pieces went."""
    sent = 0
    for start in range(0, len(data), piece):
        sock.sendall(data[start : start + piece])
        sent += 1
        readable, _, _ = select.select([sock], [], [], every)  # the client's pace
        if readable and sock.recv(1, socket.MSG_PEEK) == b"":  # closed: an answer stays
            break
    return sent


def test_a_body_slower_than_the_minimum_rate_is_cut_off(start_server: ServerFactory) -> None:
    """A body slower than the minimum rate is cut off; one at 2,000 bytes a second is served."""
    # A body that never stalls for the client timeout but comes a byte every 0.2 s (5 bytes a
    # second) is cut off once the timeout and its bytes' allowance (a second each 500 bytes) have
    # passed; a client that trickled so was held for as long as it liked.
    server = start_server("--client-timeout", "1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(POST_HEAD)
        sent = trickle(sock, b"x" * 100, 1, 0.2)
        elapsed = time.monotonic() - started
    assert sent < 100
    assert 0.9 <= elapsed < 3
    cut_off = "closing a connection whose body came slower than 500 B/s"
    wait_until(lambda: cut_off in server.stderr, "the cut-off's line")
    body = b'{"name": "Rex", "categoryId": 1}'.ljust(6000)
    head = POST_HEAD.replace(b"Content-Length: 100", b"Content-Length: 6000")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head)
        assert trickle(sock, body, 1000, 0.5) == 6  # 3 s, past the timeout: each second 2,000 bytes
        sock.shutdown(socket.SHUT_WR)
        assert read_until_closed(sock).startswith(b"HTTP/1.1 201 Created\r\n")


def test_trailers_without_end_are_refused(start_server: ServerFactory) -> None:
    """Chunked trailers past 1 MiB 64 KiB are a 400 and the connection is closed."""
    # A chunked body's trailers are headers httptools keeps whatever their size; the bound counts
    # what was read since the body's last piece. 300 MB of them grew the process by 300 MB.
    server = start_server()
    limit = 64 * 1024 + 1024 * 1024
    head = POST_HEAD.replace(b"Content-Length: 100", b"Transfer-Encoding: chunked")
    trailers = b"".join(b"X-T%d: %s\r\n" % (n, b"t" * 8000) for n in range(200))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(head + b"2\r\n{}\r\n0\r\n")
        with contextlib.suppress(OSError):  # it may close before all is sent
            sock.sendall(trailers)
        answer = read_until_closed(sock)
    status_line, _, body = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 400 Bad Request"
    assert json.loads(body.partition(b"\r\n\r\n")[2]) == {
        "code": "validation_error",
        "message": f"Request trailers larger than {limit} bytes; the connection is closed",
        "status": 400,
    }


def exchange_on(sock: socket.socket, sent: bytes) -> bytes:
    """Send a request on an open connection; its whole answer (Content-Length bodies)."""
    sock.sendall(sent)
    received = b""
    while b"\r\n\r\n" not in received:
        received += _more(sock, received)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += _more(sock, body)
    return head + b"\r\n\r\n" + body


def _more(sock: socket.socket, received: bytes) -> bytes:
    """The next bytes of an answer; a failure if the server closed the connection first."""
    more = sock.recv(65536)
    assert more, f"the connection closed after {len(received)} bytes: {received[:200]!r}"
    return more


def test_bodies_of_any_framing_or_size_are_not_taken_for_trailers(
    start_server: ServerFactory,
) -> None:
    """The trailers' bound counts no body: large chunked and unread bodies are not refused."""
    # A 400 KB create in 1-byte chunks (2.4 MB with their framing) is made, and a 3 MB body no route
    # reads (a PUT's 405) leaves the connection to the next request. Both were refused.
    server = start_server()
    name = "r" * 400_000
    body = b'{"name": "%s", "categoryId": 1}' % name.encode()
    chunked = b"".join(b"1\r\n%c\r\n" % byte for byte in body) + b"0\r\n\r\n"
    head = POST_HEAD.replace(b"Content-Length: 100", b"Transfer-Encoding: chunked")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        assert exchange_on(sock, head + chunked).startswith(b"HTTP/1.1 201 Created\r\n")
        put = (
            f"PUT /v1/pets/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            "Content-Length: 3000000\r\n\r\n"
        ).encode()
        assert exchange_on(sock, put).startswith(b"HTTP/1.1 405 ")
        sock.sendall(b" " * 3_000_000)
        get = f"GET /v1/pets/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
        assert exchange_on(sock, get.encode()).startswith(b"HTTP/1.1 200 OK\r\n")


def test_pipelined_heads_split_across_reads_are_not_taken_for_a_long_head(
    start_server: ServerFactory,
) -> None:
    """A pipelined head split across two reads ends early in the next read: no long-head 400."""
    # 10,000 small requests pipelined in one go: a head that a read cuts in two ends early in the
    # next read, whatever follows it. One in 1,600 was a 400, "Request head larger than 65536
    # bytes", and the connection closed.
    server = start_server()
    request = f"GET /v1/pets/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request.encode() * 10_000)
        received = b""
        while received.count(b"HTTP/1.1 ") < 10_000 and (chunk := sock.recv(1 << 20)):
            received += chunk
    assert received.count(b"HTTP/1.1 404 Not Found\r\n") == 10_000


@pytest.mark.parametrize("expect", [False, True], ids=["body-sent", "expect-100-continue"])
def test_a_body_held_back_by_the_server_is_not_the_client_s_stall(
    start_server: ServerFactory, expect: bool
) -> None:
    """A body the app has not read or asked for is not the client's stall: the create is made."""
    # While the app has not read what the client sent (a fault's delay holds the create, and uvicorn
    # stops reading past 64 KiB), or has not yet asked for it (`Expect: 100-continue`), the client
    # owes nothing: a delay three times the client timeout ends in the create, not a reset.
    server = start_server("--client-timeout", "1", "--admin-key", "admin-key-0123456789")
    body = b'{"name": "%s", "categoryId": 1}' % (b"d" * 300_000)
    head = (
        f"POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"Prefer: delay=3000\r\n{'Expect: 100-continue' if expect else 'X-No: expect'}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        if expect:
            sock.sendall(head)
            assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
            answer = exchange_on(sock, body)
        else:
            answer = exchange_on(sock, head + body)
    assert answer.startswith(b"HTTP/1.1 201 Created\r\n")


def large_answers_unread(server: Server, pets: int, name: int, requests: int) -> socket.socket:
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


def test_pipelined_answers_to_a_client_gone_are_dropped_without_a_traceback(
    start_server: ServerFactory,
) -> None:
    """Pipelined answers to a client gone are dropped in silence, without a traceback."""
    # A client pipelines large listPets, reads none, and leaves: the requests queued behind the one
    # being written are answered into a closed connection, dropped in silence, as asyncio's
    # transports do. uvloop's raised, and each such client left an "Exception in ASGI application"
    # and its traceback.
    server = start_server()
    with large_answers_unread(server, pets=30, name=4000, requests=8) as sock:
        select.select([sock], [], [], 5)  # the first answer is being written
    # The one being written and the next (uvicorn drops the rest once the client is gone).
    wait_until(lambda: server.stdout.count('"GET /v1/pets" 200') >= 2, "two answered")
    assert server.stop() == 0  # everything logged
    assert "Traceback" not in server.stderr, server.stderr


def test_an_answer_cut_off_by_the_shutdown_mid_write_leaves_no_traceback(
    start_server: ServerFactory,
) -> None:
    """An answer cut off mid-write by the shutdown closes the connection with no traceback."""
    # Large answers held by a client that reads none of them, when SIGTERM's grace runs out: the one
    # being written is cancelled mid-answer. No traceback is the README's promise for a request cut
    # off.
    server = start_server()
    # 20 answers of 400 KB: past what the kernel's buffers hold
    with large_answers_unread(server, pets=100, name=2000, requests=20):
        wait_until(lambda: '"GET /v1/pets" 200' in server.stdout, "the first answered")
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(15) == 0
    assert "timeout graceful shutdown exceeded" in server.stderr
    assert "Traceback" not in server.stderr, server.stderr


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
    assert "is not read under `uvicorn app:app`" not in server.stderr


def test_uvicorn_app_is_not_ready_from_a_sigterm_on(launch: Launcher) -> None:
    """Under `uvicorn app:app`, /readyz answers 503 from a SIGTERM on, as under app.py."""
    # uvicorn's server acts on a SIGTERM at its next check and marked the app stopping only at
    # the lifespan's end: a /readyz behind a request in flight was answered 200 "ready".
    port = free_port()
    env = {"PETSTORE_API_KEYS": KEY, "PETSTORE_ADMIN_KEYS": ADMIN_KEY}
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--log-level", "trace"]
    server = launch(argv, env, port)
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        delayed = "GET /v1/pets/1 HTTP/1.1\r\nHost: x\r\nPrefer: delay=1000\r\n"
        sock.sendall(
            f"{delayed}{AUTH_LINE.decode()}\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        wait_until(
            lambda: "Started scope={'type': 'http'" in server.stderr, "the request in the app"
        )
        server.process.send_signal(signal.SIGTERM)
        answers = read_until_closed(sock)
    assert re.findall(rb"HTTP/1.1 (\d+)", answers) == [b"404", b"503"], answers
    assert b"Shutting down" in answers
    assert server.process.wait(10) in (0, -signal.SIGTERM)


def test_uvicorn_app_s_json_log_keeps_its_last_lines() -> None:
    """Under `uvicorn app:app`, the JSON log's lines at a SIGTERM are all written, the last one
    uvicorn's "Finished server process"."""
    # Written by a thread of their own (logs.Outlet), they were lost when uvicorn raised the
    # SIGTERM again, which ends the process at once: the log stopped at "Shutting down" (read
    # through a pipe, as a container's runtime reads it).
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
    assert process.returncode in (0, -signal.SIGTERM)
    messages = [json.loads(line)["message"] for line in stderr.splitlines()]
    assert messages[-3:] == [
        "Waiting for application shutdown.",
        "Application shutdown complete.",
        f"Finished server process [{process.pid}]",
    ], messages
    assert '"path":"/v1/pets"' in stdout


def test_uvicorn_app_says_what_it_leaves_unread(launch: Launcher) -> None:
    """`uvicorn app:app` says PETSTORE_HOST and PETSTORE_PORT are left to its --host and --port."""
    # Where a PETSTORE_HOST of 0.0.0.0 was ignored in silence.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--http", "app:StallGuard"]
    env = {"PETSTORE_API_KEYS": KEY, "PETSTORE_HOST": "0.0.0.0", "PETSTORE_PORT": "1234"}  # noqa: S104
    server = launch([*argv, "--port", str(port)], env, port)
    server.wait_ready()
    assert server.stop() in (0, -15)
    for variable, flag in (("PETSTORE_HOST", "host"), ("PETSTORE_PORT", "port")):
        note = f"{variable} is not read under `uvicorn app:app`: its --{flag} says where it listens"
        assert note in server.stderr


@pytest.mark.parametrize("chosen", [[], ["--http", "app:StallGuard"]], ids=["auto", "named"])
def test_uvicorn_app_has_the_app_s_protocol_and_its_settings(
    launch: Launcher, chosen: list[str]
) -> None:
    """`uvicorn app:app` (its --http left or app:StallGuard) has `python app.py`'s protocol."""
    # It is the protocol of `python app.py` for the PETSTORE_* settings: the test-control plane's
    # drop works, a stalled head is cut off at the client timeout set, and bytes that are no request
    # get one of the process's ids and a line. With --http left to uvicorn, uvicorn's own was kept:
    # a drop rule refused, a plain-text 400 without an id.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", *chosen]
    settings = {
        "PETSTORE_API_KEYS": KEY,
        "PETSTORE_ADMIN_KEYS": ADMIN_KEY,
        "PETSTORE_CLIENT_TIMEOUT": "1",
    }
    server = launch([*argv, "--port", str(port)], settings, port)
    server.wait_ready()
    with server.client() as http:
        rule = {"operation": "getPet", "drop": True, "times": 1}
        added = http.post("/_admin/faults", json=rule, headers=ADMIN)
        assert added.status_code == 201, added.text
    with socket.create_connection(("127.0.0.1", port), timeout=5) as dropped:
        dropped.sendall(b"GET /v1/pets/1 HTTP/1.1\r\nHost: x\r\n%s\r\n" % AUTH_LINE)
        assert dropped.recv(65536) == b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as stalled:
        stalled.sendall(b"GET /v1/pets HTTP/1.1\r\n")  # the default cut-off is 10 s away
        assert stalled.recv(65536) == b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as garbled:
        garbled.sendall(b"GET /v1/pets HTTP/1.1\r\nNo colon here\r\n\r\n")
        answer = garbled.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    request_id = re.search(rb"\r\nx-request-id: (\S+)\r\n", answer)
    assert request_id is not None
    assert MADE_ID.fullmatch(request_id[1].decode())
    server.wait_for_output('"- -" 400 ')
    assert server.stop() in (0, -15)
    assert "Traceback" not in server.stderr


@pytest.mark.parametrize(
    ("flags", "ours"),
    [(["--workers", "2"], True), (["--http", "h11"], False)],
    ids=["workers", "h11"],
)
def test_uvicorn_app_s_workers_have_its_protocol_and_h11_is_kept(
    launch: Launcher, tmp_path: Path, flags: list[str], ours: bool
) -> None:
    """A worker of `uvicorn app:app --workers 2` has the app's protocol; `--http h11` is kept."""
    # Bytes that are no request get an Error body, as under `python app.py`, from the worker the
    # connection reaches: a worker imports the app after uvicorn made its protocol's class,
    # `uvicorn app:app` before. `--http h11`, asked for, is uvicorn's own protocol.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), *flags]
    env = {"PETSTORE_API_KEYS": KEY, "PETSTORE_DATA": str(tmp_path / "pets.jsonl")}
    server = launch(argv, env, port)
    server.wait_ready()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as garbled:
        garbled.sendall(b"GET /v1/pets HTTP/1.1\r\nNo colon here\r\n\r\n")
        answer = garbled.makefile("rb").read()
    assert server.stop() in (0, -15)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert (b"\r\nx-request-id: " in head, body.startswith(b'{"code":"validation_error"')) == (
        ours,
        ours,
    )


def test_uvicorn_reload_over_memory_serves(launch: Launcher) -> None:
    """`uvicorn app:app --reload` runs one worker at a time, and serves pets in memory."""
    # The worker is a child process, as --workers' are; it was refused as several workers.
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--reload"],
        {"PETSTORE_API_KEYS": KEY},
        port,
    )
    server.wait_ready()
    with server.client() as http:
        created = http.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=bearer(KEY))
        assert created.status_code == 201
    assert "several workers" not in server.stderr
    assert server.stop() in (0, -15)


WORKERS_REFUSED = (
    "petstore: several workers would each keep their own in-memory pets: run one worker"
)


@pytest.mark.parametrize("extra", [[], ["--reload-dir", "."]], ids=["workers", "reload-dir"])
def test_uvicorn_with_two_workers_over_memory_says_why_it_is_refused(
    launch: Launcher, extra: list[str]
) -> None:
    """`uvicorn app:app --workers 2` over memory prints a clear refusal; so does `--reload-dir`."""
    # `--reload-dir` reloads nothing without `--reload`.
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2", *extra],
        {"PETSTORE_API_KEYS": KEY},
        port,
    )
    wait_until(lambda: WORKERS_REFUSED in server.stderr.splitlines(), "the refusal")
    assert not answers(server.base_url)


def test_uvicorn_with_two_workers_and_no_key_says_why_it_is_refused(launch: Launcher) -> None:
    """Several workers with no key configured are refused, saying why."""
    # Each would make its own key, and a request would be accepted by one worker and refused by the
    # next.
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2"],
        {},
        port,
    )
    refusal = "petstore: several workers would each make their own key: configure one"
    wait_until(lambda: f"{refusal} (PETSTORE_API_KEYS)" in server.stderr.splitlines(), refusal)
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
            f"still running after 10 s, {lines.count(WORKERS_REFUSED)} refusals so far; "
            "stderr starts:\n" + "\n".join(lines[:12])
        ) from None
    stderr = server.stderr
    lines = stderr.splitlines()
    assert 1 <= lines.count(WORKERS_REFUSED) <= 2, stderr  # once a worker, never restarted
    assert any("failed to start, stopping the parent process" in line for line in lines), stderr


def test_each_worker_refuses_in_one_write(tmp_path: Path) -> None:
    """Each worker's refusal goes out on the shared stderr as one write, the line with its end."""
    # print() wrote the two apart under PYTHONUNBUFFERED (as in CI), and two workers' lines came out
    # as one line and an empty one.
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
            "200",
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
    whole = f'write(2, "{WORKERS_REFUSED}\\n", '
    assert all(whole in line for line in refusals), refusals


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
    # With 20,000 pets to seed.
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{"name": f"pet {n}", "categoryId": 1} for n in range(20_000)]))
    argv = [sys.executable, "app.py", "--port", "0", "--seed", str(seed), "--api-key", KEY]
    server = launch(argv, {}, 0)
    ready = READY_LINE.search(server.wait_for_output("petstore: ready at "))
    assert ready, server.stdout_path.read_text()
    url = f"http://127.0.0.1:{ready['port']}"
    assert httpx.get(f"{url}/readyz").status_code == 200
    last = httpx.get(f"{url}/v1/pets/20000", headers=bearer(KEY))
    assert (last.status_code, last.json()["name"]) == (200, "pet 19999")


# --------------------------------------------------------------------------- stdout


def test_the_key_and_ready_lines_go_out_in_one_write(tmp_path: Path) -> None:
    """The generated key's line and the ready line go out in one write, once the service listens."""
    # Under PYTHONUNBUFFERED (the image sets it) print() wrote a line and its end in two system
    # calls, and another writer's line could come in between.
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


def test_a_start_that_fails_shows_no_generated_key() -> None:
    """A start that fails shows no generated key: the key is shown once the service listens."""
    # Here, a port in use; it printed one for a run that never served.
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = finished([sys.executable, "app.py", "--port", str(port)])
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(f"petstore: cannot listen on 127.0.0.1:{port}: ")


KEY_LOST = (
    "ERROR     petstore: the generated API key could not be shown (stdout can't be written), so"
    " no request can be authorized: configure a key (--api-key, PETSTORE_API_KEYS)"
)


@pytest.mark.parametrize(
    ("stdout", "error", "key"),
    [
        ("no reader", "[Errno 32] Broken pipe", KEY),
        ("/dev/full", "[Errno 28] No space left on device", KEY),
        ("no reader", "[Errno 32] Broken pipe", None),
    ],
    ids=["no-reader", "full-device", "no-reader-generated-key"],
)
def test_a_stdout_that_cannot_be_written_stops_the_access_log_not_the_service(
    tmp_path: Path, stdout: str, error: str, key: str | None
) -> None:
    """A stdout that can't be written stops the access log, said once; the service still serves."""
    # stdout's reader gone before the first line (`python app.py | true`), or a full device: the
    # ready line's write fails, which is said once on stderr; the access log stops, and the service
    # serves, then stops cleanly. The failed print used to end the start with a traceback. A
    # generated key that could not be shown is said to be lost.
    port = free_port()
    if stdout == "no reader":
        read_end, out = os.pipe()
        os.close(read_end)
    else:
        out = os.open(stdout, os.O_WRONLY)
    stderr = tmp_path / "stderr"
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), *(["--api-key", key] if key else [])],
            stdout=out,
            stderr=err,
            env=environment(),
            cwd=ROOT,
        )
    os.close(out)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}"), "the service answers")
        for _ in range(3):
            listed = httpx.get(f"http://127.0.0.1:{port}/v1/pets", headers=bearer(KEY))
            assert listed.status_code == (200 if key else 401)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(15)
    assert code in (0, -15)
    text = stderr.read_text()
    assert "Traceback" not in text
    stopped = [line for line in text.splitlines() if "access log stopped" in line]
    assert stopped == [f"ERROR     petstore: access log stopped: cannot write it: {error}"]
    assert (KEY_LOST in text.splitlines()) == (key is None)


def test_a_closed_stdout_stops_the_start_in_one_line() -> None:
    """Started with stdout closed (`>&-`): one line and exit 2, as a bad setting."""
    # uvicorn's log set-up failed on it with a traceback.
    result = finished(
        ["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "app.py", "--port", "0"],
        {"PETSTORE_API_KEYS": KEY},
    )
    assert (result.returncode, result.stderr) == (
        2,
        "petstore: stdout is closed: start with it open (>/dev/null drops the access log)\n",
    )


# --------------------------------------------------------------------------- healthcheck


def healthcheck(
    port: int, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return finished([sys.executable, "app.py", "healthcheck", "--port", str(port), *args], env)


@pytest.mark.parametrize(
    ("host", "refusal"),
    [
        ("127.0.0.1", "cannot listen on 127.0.0.1:{port}: Address already in use"),
        ("no.such.host.invalid", "cannot listen on no.such.host.invalid: "),
        ("192.0.2.1", "cannot listen on 192.0.2.1:{port}: Cannot assign requested address"),
    ],
    ids=["port-in-use", "unknown-host", "address-not-ours"],
)
def test_an_address_the_service_cannot_have_stops_the_start_in_one_line(
    host: str, refusal: str, tmp_path: Path
) -> None:
    """An address the service can't have: one line and exit 2, before the store is loaded."""
    # A port in use, a host that doesn't resolve or isn't this machine's: as a bad setting; the data
    # file is not even made. uvicorn alone loaded the store first, then wrote six lines and exited
    # 3.
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


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])  # noqa: S104 - the probe's case
def test_healthcheck_passes_against_a_live_service(start_server: ServerFactory, host: str) -> None:
    """The healthcheck exits 0, printing nothing, when /healthz answers; /readyz with `--ready`."""
    # 0.0.0.0 probes the loopback.
    server = start_server()
    for extra in ((), ("--ready",)):
        result = healthcheck(server.port, "--host", host, *extra)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


# Any address probes its family's loopback: 0.0.0.0 127.0.0.1, and :: ::1 where the machine
# has IPv6 (as HOSTS above). A host in brackets, as the ready line writes it, is the same host.
ANY_AND_LOOPBACK = [
    ("0.0.0.0", "127.0.0.1"),  # noqa: S104 - the probe's case
    ("[127.0.0.1]", "127.0.0.1"),
    *([("::", "::1"), ("[::]", "::1"), ("[::1]", "::1")] if can_bind("::1") else []),
]


@pytest.mark.parametrize(("host", "loopback"), ANY_AND_LOOPBACK)
def test_healthcheck_probes_the_loopback_for_any_address(
    launch: Launcher, host: str, loopback: str
) -> None:
    """--host 0.0.0.0 or :: probes that family's loopback; `[::1]` is ::1."""
    # A service bound to the loopback (and to nothing else) answers there; for `[::1]` it asked
    # `[[::1]]`, which never resolved.
    argv = [sys.executable, "app.py", "--port", "0", "--host", loopback, "--api-key", KEY]
    server = launch(argv, {}, 0)
    ready = READY_LINE.search(server.wait_for_output("petstore: ready at "))
    assert ready, server.stdout_path.read_text()
    result = healthcheck(int(ready["port"]), "--host", host)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_healthcheck_imports_neither_the_service_nor_its_server() -> None:
    """The healthcheck loads only the standard library and settings.py, not the service."""
    # The image runs it every 10 s: before app.py's imports it loads those (0.1 s, where the whole
    # service took 0.3 s of CPU a check).
    result = finished(
        [sys.executable, "-X", "importtime", "app.py", "healthcheck", "--port", str(free_port())]
    )
    assert result.returncode == 1  # nothing listens there
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "settings" in imported
    heavy = {"uvicorn", "starlette", "msgspec", "asyncpg", "prometheus_client", "server", "routing"}
    assert not imported & heavy


def test_healthcheck_reads_only_the_address(start_server: ServerFactory) -> None:
    """A setting the healthcheck has no use for can't fail it; every service flag is taken."""
    # Such as a key file rotated away, or a log level it doesn't know.
    server = start_server()
    env = {"PETSTORE_API_KEYS_FILE": "/nonexistent/keys", "PETSTORE_LOG_LEVEL": "loud"}
    result = healthcheck(server.port, "--metrics", "sometimes", env=env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_healthcheck_fails_where_nothing_listens(start_server: ServerFactory) -> None:
    """A stopped service: exit 1 and one line saying what failed."""
    server = start_server()
    assert server.stop() == 0
    result = healthcheck(server.port)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"petstore healthcheck: http://127.0.0.1:{server.port}/healthz")


def test_healthcheck_of_port_0_says_it_needs_a_fixed_port() -> None:
    """With port 0 (PETSTORE_PORT=0 in the image) the check fails saying a fixed port is needed."""
    # It asked 127.0.0.1:0, "Connection refused", and a container never became healthy.
    result = healthcheck(0)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        "petstore healthcheck: port 0 names no port to ask: give the service a fixed one"
        " (PETSTORE_PORT, --port) for the check\n"
    )


def test_healthcheck_fails_on_a_service_that_does_not_answer() -> None:
    """A service not ready to answer (it accepts, then says nothing): exit 1 within about 2 s."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        began = time.monotonic()
        result = healthcheck(listener.getsockname()[1])
        took = time.monotonic() - began
    assert result.returncode == 1
    assert result.stderr.endswith("/healthz: no whole answer within 2 s\n")
    assert len(result.stderr.splitlines()) == 1
    assert 2 <= took < 10


def test_healthcheck_fails_on_an_answer_that_trickles_in() -> None:
    """The healthcheck's 2 s are the whole check's: a 200 trickled in over 12 s fails it."""
    # The 200 is sent a byte every 0.2 s (12 s in all); each read's timeout alone had let it pass
    # after the 12 s.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-pad: %s\r\n\r\n{}" % (b"p" * 20)

        def trickle() -> None:
            connection, _ = listener.accept()
            with connection, contextlib.suppress(OSError):
                connection.recv(65536)
                for byte in answer:
                    connection.sendall(bytes([byte]))
                    time.sleep(0.2)  # the slow server itself, not a wait for something

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        result = healthcheck(port)
    assert result.returncode == 1
    assert result.stderr == (
        f"petstore healthcheck: http://127.0.0.1:{port}/healthz: no whole answer within 2 s\n"
    )


def test_healthcheck_fails_on_a_body_that_trickles_in() -> None:
    """The whole answer, its body too, must come within 2 s: a body 3 s after the head fails it."""
    # A head sent at once and a body that comes in 3 s later fails it; the head alone passed it in a
    # tenth of a second.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        head_sent = threading.Event()

        def late_body() -> None:
            connection, _ = listener.accept()
            with connection, contextlib.suppress(OSError):
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 15\r\n\r\n{")
                head_sent.set()
                time.sleep(3)  # the slow server itself, not a wait for something
                connection.sendall(b'"status":"ok"}')

        thread = threading.Thread(target=late_body, daemon=True)
        thread.start()
        result = healthcheck(port)
    assert head_sent.is_set()
    assert result.returncode == 1
    assert result.stderr == (
        f"petstore healthcheck: http://127.0.0.1:{port}/healthz: no whole answer within 2 s\n"
    )


def test_healthcheck_says_in_one_line_what_a_server_that_is_no_http_one_sent() -> None:
    """Something else on the port (an SSH server's greeting, with its line end): one line."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def greet() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")

        thread = threading.Thread(target=greet)
        thread.start()
        result = healthcheck(port)
        thread.join(10)
    assert result.returncode == 1
    assert result.stderr == (
        f"petstore healthcheck: http://127.0.0.1:{port}/healthz: SSH-2.0-OpenSSH_9.2p1\n"
    )


def test_healthcheck_ready_asks_readyz() -> None:
    """`--ready` asks /readyz: 503 where a service can't serve, while /healthz says 200."""
    # A service that can't serve: its database down. A compose file's service_healthy can wait for
    # that.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        asked = []

        def answer(times: int) -> None:
            for _ in range(times):
                connection, _ = listener.accept()
                with connection:
                    request = connection.recv(65536)
                    asked.append(request.split()[1].decode())
                    status = b"503 Service Unavailable" if b"/readyz" in request else b"200 OK"
                    connection.sendall(b"HTTP/1.1 %s\r\ncontent-length: 0\r\n\r\n" % status)

        thread = threading.Thread(target=answer, args=(2,))
        thread.start()
        live = healthcheck(port)
        ready = healthcheck(port, "--ready")
        thread.join(10)
    assert asked == ["/healthz", "/readyz"]
    assert (live.returncode, live.stderr) == (0, "")
    assert ready.returncode == 1
    assert ready.stderr == f"petstore healthcheck: http://127.0.0.1:{port}/readyz answered 503\n"


def test_healthcheck_fails_on_an_answer_other_than_200() -> None:
    """Anything but 200 from /healthz: exit 1, the status in the line."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        answer = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"

        def answer_once() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(answer)

        thread = threading.Thread(target=answer_once)
        thread.start()
        result = healthcheck(port)
        thread.join(10)
    assert result.returncode == 1
    assert result.stderr == f"petstore healthcheck: http://127.0.0.1:{port}/healthz answered 503\n"


def test_a_request_leaves_no_garbage_for_the_collector(app: Petstore) -> None:
    """Under StallGuard a request's objects are freed as it ends, none left in a reference cycle."""
    # uvicorn's protocol under StallGuard, in this process. Objects in cycles, one set a request,
    # cost 6 % of the CPU in collections, and their pauses.

    async def exchange() -> list[object]:
        config = uvicorn.Config(
            app, port=0, http=http_protocol(Settings(), app.access_log.note_refusal), lifespan="off"
        )
        serving = uvicorn.Server(config)
        listener = socket.create_server(("127.0.0.1", 0))  # listening: connect at once
        task = asyncio.create_task(serving.serve(sockets=[listener]))
        reader, writer = await asyncio.open_connection(*listener.getsockname())

        async def get(path: bytes) -> None:
            writer.write(b"GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path, AUTH_LINE))
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"content-length: (\d+)", head, re.IGNORECASE)
            assert length is not None, head
            await reader.readexactly(int(length[1]))

        await get(b"/healthz")  # served: started up
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for path in (b"/v1/pets", b"/v1/pets/1", b"/healthz"):
                await get(path)
            gc.collect()
            garbage = [
                o for o in gc.garbage if type(o).__module__.startswith(("uvicorn", "server"))
            ]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        writer.close()
        serving.should_exit = True
        await task
        return garbage

    assert asyncio.run(exchange()) == []


def test_a_response_goes_out_in_one_write(tmp_path: Path, start_traced: TracedFactory) -> None:
    """StallGuard sends a response's head and body in one write; uvicorn writes them apart."""
    # A body over 64 KiB: one writev of the two. A HEAD response's head (no body follows) and a 100
    # Continue go out at once, by themselves.
    trace = tmp_path / "writes.trace"
    strace_args = ("-e", "trace=write,writev", "-s", "2000", "-o", str(trace))
    server = start_traced(tmp_path / "pets.jsonl", *strace_args)
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    connection.request("GET", "/v1/pets/1", headers=bearer(KEY))
    missing = connection.getresponse()
    assert (missing.status, json.loads(missing.read())["code"]) == (404, "not_found")
    connection.request("HEAD", "/v1/pets", headers=bearer(KEY))
    head = connection.getresponse()
    assert (head.status, head.read()) == (200, b"")
    connection.request("GET", "/docs/swagger-ui-bundle.js")  # over 64 KiB: a writev of the two
    bundle = connection.getresponse()
    length = int(bundle.headers["content-length"])
    assert (bundle.status, len(bundle.read())) == (200, length)
    assert length > 64 * 1024
    connection.close()
    body = json.dumps({"name": "Rex", "categoryId": 1}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n"
            b"Expect: 100-continue\r\n\r\n" % (KEY.encode(), len(body))
        )
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"  # before the body is sent
        sock.sendall(body)
        assert sock.recv(1000).startswith(b"HTTP/1.1 201 Created\r\n")
    assert server.stop() in (0, -15)
    calls = [
        line
        for line in trace.read_text().splitlines()
        if '"HTTP/1.1 ' in line and '\\"ready\\"' not in line  # not readiness, polled first
    ]
    assert len(calls) == 5, calls
    not_found, head_only, large, go_on, created = calls
    assert " write(" in not_found and '\\r\\n\\r\\n{\\"code\\":\\"not_found\\"' in not_found
    assert " write(" in head_only and head_only.endswith(
        '\\r\\n\\r\\n", ' + head_only.split(", ")[-1]
    )
    assert " writev(" in large and large.endswith(f"], 2) = {large.split()[-1]}")
    assert int(large.split()[-1]) == length + int(large.split("iov_len=")[1].split("}")[0])
    assert " write(" in go_on and '"HTTP/1.1 100 Continue\\r\\n\\r\\n"' in go_on
    assert " write(" in created and '\\r\\n\\r\\n{\\"id\\":1,' in created


# An id the service made: a per-process prefix of 8 hex digits and a hex counter.
MADE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]+")


def exchange_raw(port: int, sent: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send these bytes, read until the server closes: the status line, headers and body."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(sent)
        while chunk := connection.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
    return status, headers, body


@pytest.mark.parametrize(
    ("codings", "sent_gzip"),
    [
        ("Transfer-Encoding: gzip, chunked\r\n", True),
        ("Transfer-Encoding: gzip, chunked\r\n", False),
        ("Transfer-Encoding: deflate\r\nTransfer-Encoding: chunked\r\n", False),
    ],
    ids=["gzip-really", "gzip-said", "two-headers"],
)
def test_a_transfer_coding_but_chunked_is_415(
    start_server: ServerFactory, codings: str, sent_gzip: bool
) -> None:
    """A create with a transfer coding other than chunked is refused 415, nothing stored."""
    # The server undoes the chunks, and no other transfer coding: a create that says it sent gzip is
    # refused, whether it did (it was told its JSON was malformed) or not (that one made a pet);
    # chunked alone is a create.
    server = start_server()
    plain = b'{"name": "Rex", "categoryId": 1}'
    head = (
        f"POST /v1/pets HTTP/1.1\r\nHost: petstore\r\nAuthorization: Bearer {KEY}\r\n"
        "Content-Type: application/json\r\nConnection: close\r\n"
    )

    def chunked(body: bytes) -> bytes:
        return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)

    sent = chunked(gzip.compress(plain) if sent_gzip else plain)
    status, headers, answer = exchange_raw(server.port, f"{head}{codings}\r\n".encode() + sent)
    with server.client() as http:
        assert http.get("/v1/pets").json() == []
    assert (status, headers["content-type"]) == (
        "HTTP/1.1 415 Unsupported Media Type",
        "application/json",
    )
    assert json.loads(answer)["message"].startswith("Transfer-Encoding '")
    status, _, _ = exchange_raw(
        server.port, f"{head}Transfer-Encoding: chunked\r\n\r\n".encode() + chunked(plain)
    )
    assert status == "HTTP/1.1 201 Created"


@pytest.mark.parametrize("length", [2**64, 10**23])
def test_a_content_length_past_64_bits_is_a_413(start_server: ServerFactory, length: int) -> None:
    """A Content-Length over the limit is a 413 however many digits it has, connection closed."""
    # CONTRACT. Past 64 bits the parser refuses it, and that refusal is the 413 too (it was a 400
    # `validation_error`), with the client's id.
    server = start_server()
    head = POST_HEAD.replace(b"Content-Length: 100", b"Content-Length: %d" % length)
    status, headers, body = exchange_raw(
        server.port, head.replace(b"Host: x", b"X-Request-Id: big")
    )
    assert (status, headers["x-request-id"], headers["connection"]) == (
        "HTTP/1.1 413 Request Entity Too Large",
        "big",
        "close",
    )
    assert json.loads(body) == {
        "code": "payload_too_large",
        "message": "The body is over the limit: its Content-Length overflows 64 bits; the"
        " connection is closed",
        "status": 413,
    }
    assert server.wait_for_output('"- -" 413 ').count(" big\n") == 1


BAD_LENGTH: Final = "invalid character in Content-Length"


@pytest.mark.parametrize(
    ("sent", "echoed", "reason"),
    [
        (
            b"GET /v1/pets HTTP/1.1\r\nX-Request-Id: sent-first\r\nContent-Length: x\r\n\r\n",
            True,
            BAD_LENGTH,
        ),
        (
            b"GET /v1/pets HTTP/1.1\r\nX-Request-Id: two words\r\nContent-Length: x\r\n\r\n",
            False,
            BAD_LENGTH,
        ),
        (b"GET /v1/pets HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n", False, "invalid header token"),
        (b"NOT AN HTTP REQUEST\r\n\r\n", False, "invalid method encountered"),
        (b"get /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n", False, "invalid method encountered"),
        (b"CONNECT example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n", False, "invalid request target"),
        (
            b"GET /%s HTTP/1.1\r\nHost: x\r\n\r\n" % (b"a" * 65535),
            False,
            "request target longer than 65535 bytes",
        ),
    ],
    ids=[
        "the id, then a bad length",
        "an unusable id",
        "a header without a colon",
        "not http",
        "a method in lower case",
        "connect",
        "a target too long",
    ],
)
def test_bytes_that_are_no_request_get_an_error_body_with_an_id(
    start_server: ServerFactory, sent: bytes, echoed: bool, reason: str
) -> None:
    """Bytes uvicorn can't parse get a 400 Error body saying what was refused, with an id."""
    # What uvicorn can't parse is answered as every bad input is: a 400 Error body that says what
    # the parser refused, with the client's X-Request-Id when it came before the fault, else one of
    # the process's own ids; then the connection is closed. The access log has its line (`-` for
    # what the parser never gave: the method and the path) and the metrics count it, method and
    # route `other`.
    server = start_server()
    with server.client() as http:
        before = http.get("/healthz").headers["x-request-id"]
    status, headers, body = exchange_raw(server.port, sent)
    assert status == "HTTP/1.1 400 Bad Request"
    assert json.loads(body) == {
        "code": "validation_error",
        "message": f"Invalid HTTP request received: {reason}; the connection is closed",
        "status": 400,
    }
    assert headers["content-type"] == "application/json"
    assert headers["content-length"] == str(len(body))
    assert headers["connection"] == "close"
    if echoed:
        assert headers["x-request-id"] == "sent-first"
    else:  # the next of the ids the access log makes: same prefix, the counter one on
        prefix, _, number = before.partition("-")
        assert headers["x-request-id"] == f"{prefix}-{int(number, 16) + 1:x}"
    output = server.wait_for_output('"- -" 400 ')
    (line,) = (line for line in output.splitlines() if '"- -"' in line)
    assert re.fullmatch(rf'127\.0\.0\.1 "- -" 400 \d+us {re.escape(headers["x-request-id"])}', line)
    with server.client() as http:
        exposition = http.get("/metrics").text
    counted = 'petstore_http_requests_total{method="other",route="other",status="400"} 1.0'
    assert counted in exposition.splitlines()


def test_a_client_that_sends_a_whole_body_before_reading_gets_the_413(
    start_server: ServerFactory,
) -> None:
    """A client that sends a too-large body whole before reading gets its 413 Error, not a reset."""
    # Python's http.client sends a body whole, then reads. Closed with the body unread, the kernel
    # resets the connection, and the reset can come before the answer. Without the lingering close,
    # 5 MB: a reset each time.
    server = start_server("--max-body", "1024")
    for _ in range(3):
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        headers = {**server.headers, "Content-Type": "application/json"}
        connection.request("POST", "/v1/pets", body=b"x" * 5_000_000, headers=headers)
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())["code"]) == (
            413,
            "payload_too_large",
        )
        connection.close()
    with server.client() as client:
        assert client.get("/v1/pets").json() == []


def test_bytes_that_are_no_request_sent_with_more_get_their_400(
    start_server: ServerFactory,
) -> None:
    """A bad request line and 5 MB after it, all sent before reading: the 400, not a reset."""
    server = start_server()
    status, _, body = exchange_raw(server.port, b"NOT HTTP\r\n" + b"x" * 5_000_000)
    assert status == "HTTP/1.1 400 Bad Request"
    assert json.loads(body)["code"] == "validation_error"


def test_a_lingering_connection_is_not_taken_for_a_stalled_one(
    start_server: ServerFactory,
) -> None:
    """A client sending on after its 413 is read for the linger's 2 s, not cut off as stalled."""
    # With --client-timeout 0.5, a client answered 413 that goes on sending is read for the linger;
    # it is not cut off as stalled after half a second. The bytes it sends go to no request, so the
    # stall deadline saw none.
    server = start_server("--max-body", "1024", "--client-timeout", "0.5")
    head = (
        b"POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"%sContent-Length: 100000000\r\n\r\n" % AUTH_LINE
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(head)
        assert connection.recv(65536).startswith(b"HTTP/1.1 413 ")
        began = time.monotonic()
        with pytest.raises(OSError):  # a reset, once the lingering ends
            while time.monotonic() - began < 10:
                connection.sendall(b"x" * 4096)
                time.sleep(0.05)  # the client's pace, not a wait for the server
        assert time.monotonic() - began > 1.5
    assert server.stop() == 0
    assert "stalled" not in server.stderr


@pytest.mark.parametrize("path", [b"/v1/pets", b"/healthz"])
def test_a_fault_in_a_body_whose_app_answers_later_leaves_no_error(
    start_server: ServerFactory, path: bytes
) -> None:
    """A bad chunk in a body its app never reads gets the server's 400 whole, and no app error."""
    # One packet: a request (no key: its app answers without reading the body) whose first chunk's
    # size is bad. The server's 400 goes out whole and its side ends; the app, which runs after
    # that, answers into nothing: no "Exception in ASGI application" (writing after the end was a
    # RuntimeError and an ERROR traceback from one anonymous packet).
    server = start_server()
    sent = b"GET %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" % path
    status, headers, body = exchange_raw(server.port, sent)
    assert status == "HTTP/1.1 400 Bad Request"
    assert headers["content-length"] == str(len(body))
    assert json.loads(body)["code"] == "validation_error"
    with server.client() as client:  # a request after it: the one before has been handled
        assert client.get("/healthz").status_code == 200
    assert server.stop() == 0
    assert "Exception in ASGI application" not in server.stderr
    assert "RuntimeError" not in server.stderr


def test_a_fault_in_a_pipelined_body_is_answered_after_the_requests_before_it(
    start_server: ServerFactory,
) -> None:
    """A fault in a pipelined body is a 400 after the answers before it, with no ERROR line."""
    # One packet: a request its app answers after a delay, then one whose first chunk's size is bad.
    # The first gets its answer, then the second the server's 400, in order. The first app's write
    # after a close would be an "Exception in ASGI application".
    server = start_server("--admin-key", ADMIN_KEY)
    sent = (
        b"GET /v1/pets HTTP/1.1\r\nHost: x\r\n%sPrefer: delay=300\r\n\r\n" % AUTH_LINE
        + b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(sent)
        received = read_until_closed(connection)
    first, _, rest = received.partition(b"\r\n\r\n[]")  # the list, empty
    assert first.startswith(b"HTTP/1.1 200 OK\r\n")
    assert rest.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert server.stop() == 0
    assert "Exception in ASGI application" not in server.stderr


def test_a_lingering_connection_is_closed_in_time_and_holds_up_no_exit(
    start_server: ServerFactory,
) -> None:
    """A client sending on after its 413 is read for 2 s, then cut off; it holds up no exit."""
    # One lingering at SIGTERM does not hold the exit up.
    server = start_server("--max-body", "1024")
    head = (
        b"POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"%sContent-Length: 100000000\r\n\r\n" % AUTH_LINE
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(head)
        answer = connection.recv(65536)
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert connection.recv(65536) == b""  # our side's end: the answer is whole
        began = time.monotonic()
        with pytest.raises(OSError):  # a reset, once the lingering ends
            while time.monotonic() - began < 10:
                connection.sendall(b"x" * 65536)
                time.sleep(0.01)  # the client's pace, not a wait for the server
        assert 1.5 < time.monotonic() - began < 9
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(head)
        assert connection.recv(65536).startswith(b"HTTP/1.1 413 ")
        connection.sendall(b"x" * 65536)
        began = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(10) == 0
        assert time.monotonic() - began < 1.5


def test_a_request_head_past_the_limit_is_refused(start_server: ServerFactory) -> None:
    """A head unfinished 64 KiB past the read it began in is a 400 with the client's id."""
    # httptools keeps a request's head however long it gets: a head still unfinished 64 KiB past the
    # read it began in (uvloop reads at most 256 KiB at once, and 1 MiB is sent here) is refused
    # with a 400 Error carrying the client's id, and the connection closed. The body's bytes don't
    # count: a 300 KiB create is stored, and a 60 KiB head sent in pieces served.
    server = start_server()
    head = b"GET /v1/pets HTTP/1.1\r\nHost: x\r\nX-Request-Id: big-head\r\n"
    filler = b"X-Filler: %s\r\n" % (b"f" * 1000)
    received = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
        # Closed on us once refused (the answer written first): the rest is not taken.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.sendall(head + filler * 1024)
        with contextlib.suppress(ConnectionResetError):
            while chunk := connection.recv(65536):
                received += chunk
    answer_head, _, body = received.partition(b"\r\n\r\n")
    assert answer_head.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"\r\nx-request-id: big-head\r\n" in answer_head
    assert json.loads(body) == {
        "code": "validation_error",
        "message": "Request head larger than 65536 bytes; the connection is closed",
        "status": 400,
    }
    wait_until(lambda: "Request head larger than 65536 bytes." in server.stderr, "the warning")
    padded = b'{"name":"Rex","categoryId":1}' + b" " * 300 * 1024
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection,
        connection.makefile("rb") as stream,
    ):
        for piece in (head, *[filler] * 60, AUTH_LINE, b"\r\n"):
            connection.sendall(piece)
        assert stream.readline() == b"HTTP/1.1 200 OK\r\n"
        length = 0
        while (line := stream.readline()) != b"\r\n":
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        assert stream.read(length) == b"[]"
        connection.sendall(CREATE_HEAD + b"Content-Length: %d\r\n\r\n" % len(padded))
        for start in range(0, len(padded), 16 * 1024):
            connection.sendall(padded[start : start + 16 * 1024])
        assert stream.readline() == b"HTTP/1.1 201 Created\r\n"


def test_an_upgrade_to_websocket_is_ignored_and_the_request_answered(
    start_server: ServerFactory,
) -> None:
    """A request asking to upgrade to WebSocket is answered as HTTP, and the connection goes on."""
    # The service speaks no WebSocket; RFC 9110 lets a server ignore Upgrade. No warning tells the
    # operator to install a WebSocket library.
    server = start_server()
    upgrade = (
        b"GET /v1/pets HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n%s\r\n"
        % AUTH_LINE
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
        stream = connection.makefile("rb")
        for request, body in (
            (upgrade, b"[]"),
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", None),
        ):
            connection.sendall(request)
            assert stream.readline() == b"HTTP/1.1 200 OK\r\n"
            headers = {}
            while (line := stream.readline()) != b"\r\n":
                name, _, value = line.rstrip(b"\r\n").partition(b": ")
                headers[name] = value
            assert MADE_ID.fullmatch(headers[b"x-request-id"].decode())
            received = stream.read(int(headers[b"content-length"]))
            assert headers[b"content-type"] == b"application/json"
            assert body is None or received == body
    server.stop()
    assert "WebSocket" not in server.stderr


H2C_OFFER = (
    b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQ\r\n"
)


def test_a_request_asking_to_upgrade_is_served_with_its_body(start_server: ServerFactory) -> None:
    """A request offering an upgrade (curl --http2, Java's clients) is served with its body."""
    # httptools ends such a request at its head: its body was lost (a create "empty"), and one
    # read later was parsed as a request of its own, served (a request a proxy never saw). A
    # request pipelined behind one got no answer.
    server = start_server()
    offered = b"POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    offered += AUTH_LINE + H2C_OFFER
    rex = b'{"name":"Rex","categoryId":1}'
    tom = b'{"name":"Tom","categoryId":2}'
    hidden = (
        b"POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
        b'Content-Length: 34\r\n\r\n{"name":"Hidden","categoryId":3}' % AUTH_LINE
    )
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(tom), tom)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        answers = [exchange_on(sock, offered + b"Content-Length: %d\r\n\r\n%s" % (len(rex), rex))]
        sock.sendall(offered + b"Transfer-Encoding: chunked\r\n\r\n")
        for byte in chunked:  # a read or more later, whatever the reads
            sock.sendall(bytes([byte]))
        answers.append(exchange_on(sock, b""))
        sock.sendall(offered + b"Content-Length: %d\r\n\r\n" % len(hidden))
        answers.append(exchange_on(sock, hidden))
        pipelined = b"GET /v1/pets HTTP/1.1\r\nHost: x\r\n%s%s\r\n" % (AUTH_LINE, H2C_OFFER)
        sock.sendall(pipelined + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        last = read_until_closed(sock)
    heads = [answer.split(b"\r\n", 1)[0] for answer in answers]
    assert heads == [
        b"HTTP/1.1 201 Created",
        b"HTTP/1.1 201 Created",
        b"HTTP/1.1 400 Bad Request",  # the body, a request, read as the body it is: not JSON
    ]
    assert answers[0].endswith(b'{"id":1,"name":"Rex","categoryId":1}')
    assert answers[1].endswith(b'{"id":2,"name":"Tom","categoryId":2}')
    assert b'"code":"malformed_json"' in answers[2]
    # Both pipelined requests answered, once each; no pet but Rex and Tom.
    assert re.findall(rb"HTTP/1.1 (\d+)", last) == [b"200", b"200"]
    pets = b'[{"id":1,"name":"Rex","categoryId":1},{"id":2,"name":"Tom","categoryId":2}]'
    assert pets in last


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


CREATE_HEAD = (
    b"POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s" % AUTH_LINE
)
REX_BODY = b'{"name":"Rex","categoryId":1}'


@pytest.mark.parametrize(
    ("sent", "statuses"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nNOT HTTP\r\n\r\n", [b"200", b"400"]),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 2 + b"NOT HTTP\r\n\r\n",
            [b"200", b"200", b"400"],
        ),
        (
            CREATE_HEAD + b"Content-Length: %d\r\n\r\n%s xyz\r\n" % (len(REX_BODY), REX_BODY),
            [b"201", b"400"],
        ),
        (CREATE_HEAD + b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n", [b"400"]),
    ],
    ids=["a request, then bytes", "two, then bytes", "a body past its length", "a bad chunk"],
)
def test_answers_of_requests_read_before_a_fault_go_out_first(
    start_server: ServerFactory, sent: bytes, statuses: list[bytes]
) -> None:
    """Requests read whole before bytes that are no request are answered in order, then the 400."""
    # uvicorn's 400 went out at once: the answers, a 201 among them, were lost. A fault in a
    # request's own body is that request's 400.
    server = start_server()
    received = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as connection:
        connection.sendall(sent)
        while chunk := connection.recv(65536):
            received += chunk
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", received) == statuses
    with server.client() as http:
        stored = http.get("/v1/pets").json()
    assert stored == ([{"id": 1, "name": "Rex", "categoryId": 1}] if b"201" in statuses else [])


def test_the_readme_s_pytest_fixture_works_as_written(tmp_path: Path) -> None:
    """The README's pytest fixture, run in a project of its own, works as written."""
    # Copied into a project of its own and run by pytest: it starts the service from its checkout's
    # .venv, reads where it listens, and resets it between tests. It had started the service with
    # the test runner's interpreter, which lacks its packages, and hid why behind an
    # UnboundLocalError.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    fixture = re.search(r"```python\n(import subprocess, pytest, httpx\n.*?)```", readme, re.S)
    assert fixture, "the README's fixture"
    code = fixture[1].replace('PETSTORE = "path/to/petstore"', f"PETSTORE = {str(ROOT)!r}")
    assert code != fixture[1]
    (tmp_path / "conftest.py").write_text(code, encoding="utf-8")
    (tmp_path / "test_uses_it.py").write_text(
        "import httpx\nfrom conftest import API_KEY\n\n\n"
        "def test_one(petstore):\n"
        "    auth = {'Authorization': f'Bearer {API_KEY}'}\n"
        "    pet = {'name': 'Rex', 'categoryId': 1}\n"
        "    assert httpx.post(f'{petstore}/pets', json=pet, headers=auth).json()['id'] == 1\n\n\n"
        "def test_two_after_a_reset(petstore):\n"
        "    auth = {'Authorization': f'Bearer {API_KEY}'}\n"
        "    assert httpx.get(f'{petstore}/pets', headers=auth).json() == []\n",
        encoding="utf-8",
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def test_a_closed_stdout_is_refused_in_json_when_asked() -> None:
    """Started with stdout closed and JSON logs asked for: the refusal is one JSON line."""
    result = finished(
        ["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "app.py", "--port", "0"],
        {"PETSTORE_API_KEYS": KEY, "PETSTORE_LOG_FORMAT": "json"},
    )
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert json.loads(line)["message"] == (
        "stdout is closed: start with it open (>/dev/null drops the access log)"
    )


def test_uvicorn_with_two_workers_and_an_admin_key_says_why_it_is_refused(launch: Launcher) -> None:
    """Several workers with the test-control plane: refused (each would keep its own rules)."""
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--workers", "2"],
        {"PETSTORE_API_KEYS": KEY, "PETSTORE_ADMIN_KEYS": "admin-key-0123456789abcdef"},
        port,
    )
    refusal = "petstore: several workers would each keep their own fault rules and journal"
    wait_until(
        lambda: any(line.startswith(refusal) for line in server.stderr.splitlines()), refusal
    )
    assert not answers(server.base_url)


def test_from_a_sigterm_on_no_new_connection_is_taken(start_server: ServerFactory) -> None:
    """Once a SIGTERM is acted on (/readyz 503), a new connection is refused at once."""
    # uvicorn took and served them (a create's 201) until its next check, up to 0.1 s later.
    server = start_server()
    with server.client() as http:  # one connection, kept alive
        assert http.get("/readyz").status_code == 200
        server.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(httpx.TransportError):  # closed by the shutdown: listeners too
            wait_until(lambda: http.get("/readyz").status_code == 503, "/readyz 503")
        with pytest.raises(httpx.ConnectError):
            httpx.post(f"{server.base_url}/v1/pets", content=REX_BODY, headers=bearer(KEY))
    assert server.process.wait(10) == 0


@pytest.mark.parametrize(
    ("stop", "code"), [(signal.SIGINT, 130), (signal.SIGHUP, 0)], ids=["ctrl-c", "hangup"]
)
def test_a_ctrl_c_or_a_hangup_during_the_start_stops_it_before_serving(
    start_server: ServerFactory, tmp_path: Path, stop: signal.Signals, code: int
) -> None:
    """A Ctrl-C (a KeyboardInterrupt's traceback) or a SIGHUP during the start: as a SIGTERM."""
    fifo = tmp_path / "seed.json"
    os.mkfifo(fifo)
    server = start_server("--seed", str(fifo), wait=False)
    deadline = time.monotonic() + 15
    writer = None
    while writer is None:  # a writer opens a FIFO once its reader, the start, is there
        assert server.process.poll() is None, server.stderr
        assert time.monotonic() < deadline, "the start never opened its seed"
        with contextlib.suppress(OSError):
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        time.sleep(0.05)  # a poll interval: the loop checks the condition
    server.process.send_signal(stop)
    os.write(writer, b"[]")
    os.close(writer)
    assert server.process.wait(15) == code, server.stderr
    assert "Traceback" not in server.stderr
    assert f"stopped before serving: a {stop.name} came during the start" in server.stderr


def test_a_hangup_stops_as_a_sigterm_does(start_server: ServerFactory) -> None:
    """SIGHUP lets the request in flight finish, then exits 0 with the access log written."""
    # A terminal that closed, an ssh session dropped: it ended the process at once.
    server = start_server("--admin-key", "admin-key-0123456789", "--log-level", "trace")
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(waiting_request("X-Request-Id: hung-up\r\n").replace(b"30000", b"1000"))
        # uvicorn's trace of the app called: the request is waiting out its delay
        wait_until(lambda: "Started scope=" in server.stderr, "the request in the app")
        server.process.send_signal(signal.SIGHUP)
        status_line, headers, _ = parse_response(read_until_closed(sock))
    assert (status_line, headers["x-request-id"]) == ("HTTP/1.1 200 OK", "hung-up")
    assert server.process.wait(10) == 0
    assert "hung-up" in server.stdout  # its access line


def test_a_stop_during_the_lifespan_s_start_serves_nothing(tmp_path: Path) -> None:
    """A SIGTERM while the store opens: no ready line, no traceback, exit 0."""
    # Past the start's first part (the app built), before uvicorn listens: the listeners were
    # closed before uvicorn had made them (an asyncio traceback), and the ready line printed.
    script = tmp_path / "stop_in_open.py"
    script.write_text(
        "import asyncio, os, runpy, signal, sys\n"
        "sys.path.insert(0, os.getcwd())\n"
        "import store\n"
        "async def open_slowly(self):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    await asyncio.sleep(0.2)\n"
        "store.MemoryStore.open = open_slowly\n"
        "sys.argv = ['app.py', '--port', '0']\n"
        "runpy.run_path('app.py', run_name='__main__')\n"
    )
    result = finished([sys.executable, str(script)], {"PETSTORE_API_KEYS": KEY})
    assert result.returncode == 0, result.stderr
    assert "ready at" not in result.stdout
    assert "Traceback" not in result.stderr
    assert "stopped before serving: a SIGTERM came during the start" in result.stderr


def test_a_hangup_ignored_by_its_starter_stays_ignored(start_server: ServerFactory) -> None:
    """Started under `nohup` (SIGHUP ignored), a SIGHUP does not stop the service."""
    hangup = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # inherited by the child, as nohup's
    try:
        server = start_server()
    finally:
        signal.signal(signal.SIGHUP, hangup)
    server.process.send_signal(signal.SIGHUP)
    with server.client() as http:  # a request after it: it would be refused once stopping
        assert http.get("/healthz").status_code == 200
    assert server.process.poll() is None


def test_a_body_sent_a_while_after_its_100_continue_is_not_a_stall(
    start_server: ServerFactory,
) -> None:
    """A body sent 0.6 s after its 100 Continue (timeout 1 s), the delay's end near a check."""
    # The client owes its body from the 100 Continue on; its clock started at the last check of
    # the hold, a second before, and it was cut off as a stall.
    server = start_server("--client-timeout", "1", "--admin-key", "admin-key-0123456789")
    body = b'{"name": "Rex", "categoryId": 1}'
    head = (
        f"POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Prefer: delay=2950\r\nExpect: 100-continue\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
        time.sleep(0.6)  # the client's own pace: within its timeout, not a synchronisation
        answer = exchange_on(sock, body)
    assert answer.startswith(b"HTTP/1.1 201 Created\r\n")
