"""The connection (protocol.py): client timeouts, the parser's Error 400, `drop`; and the
healthcheck."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import logging
import re
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

import healthcheck
from protocol import DROP, REQUIRED, HttpProtocol
from settings import Settings
from tests.conftest import (
    KEY,
    ROOT,
    ServerFactory,
    environment,
    free_port,
    read_until_closed,
    wait_until,
)

# --------------------------------------------------------------------------- helpers


def exchange_on(sock: socket.socket, sent: bytes) -> bytes:
    """Send a request on an open connection; its whole answer (a Content-Length body)."""
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


async def reader(scope: Scope, receive: Receive, send: Send) -> None:
    """A tiny app: `/hold/S` waits S seconds before it reads the body; `/drop` drops the
    connection; every other request is answered 200 with the length of its body."""
    if scope["path"] == "/drop":
        scope["extensions"][DROP]["close"]()
        return
    if scope["path"].startswith("/hold/"):
        await asyncio.sleep(float(scope["path"].removeprefix("/hold/")))
    length, more = 0, True
    while more:
        message = await receive()
        length += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(length).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def serving(client_timeout: float = 10.0) -> Iterator[int]:
    """`reader` served by uvicorn with HttpProtocol in a thread of this process: its port."""
    protocol = type("Protocol", (HttpProtocol,), {"client_timeout": client_timeout})
    config = uvicorn.Config(reader, http=protocol, lifespan="off", log_config=None, ws="none")
    server = uvicorn.Server(config)
    sock = socket.create_server(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        wait_until(lambda: server.started, "the server started")
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


# --------------------------------------------------------------------------- uvicorn's class


@pytest.mark.anyio
async def test_the_installed_uvicorn_has_what_the_protocol_uses() -> None:
    """uvicorn's HttpToolsProtocol still has every name protocol.py overrides or relies on."""
    config = uvicorn.Config(reader, log_config=None)
    uvicorns = HttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    missing = [name for name in REQUIRED if not hasattr(uvicorns, name)]
    assert not missing, (
        f"uvicorn {uvicorn.__version__}'s HttpToolsProtocol lacks {missing}: protocol.py was"
        " written for uvicorn 0.54; pin that version or update protocol.py"
    )


# --------------------------------------------------------------------------- client timeouts

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
def test_a_stalled_client_is_cut_off(
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
    """Line breaks sent after an answer begin no request: the connection still owes a head."""
    server = start_server("--client-timeout", "1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        answer = exchange_on(sock, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        started = time.monotonic()
        closed = False
        while not closed and time.monotonic() - started < 8:
            with contextlib.suppress(OSError):  # a reset once closed
                sock.sendall(b"\r\n")
            closed = bool(select.select([sock], [], [], 0.3)[0]) and sock.recv(10) == b""
        elapsed = time.monotonic() - started
    assert closed
    assert elapsed < 3  # the timeout from the answer, and the check's lag at most


def test_slowloris_load_does_not_stop_the_service_answering(start_server: ServerFactory) -> None:
    """With 50 connections stalled in their request head, another client is answered at once."""
    server = start_server("--client-timeout", "3")
    stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(50)]
    try:
        for sock in stalled:
            sock.sendall(b"GET /v1/pets HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        with server.client() as client:
            response = client.get("/v1/pets")
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


@pytest.mark.parametrize(
    ("expect", "pause"),
    [(False, 0.0), (True, 0.0), (True, 0.6)],
    ids=["body-sent", "expect-100-continue", "body-a-while-after-its-100"],
)
def test_a_body_held_back_by_the_server_is_not_the_client_s_stall(
    expect: bool, pause: float
) -> None:
    """A body the app has not read (uvicorn stops reading past 64 KiB) or not asked for yet
    (`Expect: 100-continue`) is not the client's stall; the client owes it from then on."""
    # The app waits 2.95 timeouts, its end near a check, then reads; a client may take a while.
    body = b"d" * (300_000 if not expect else 30)
    head = b"POST /hold/2.95 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
    with (
        serving(client_timeout=1) as port,
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
    ):
        if expect:
            sock.sendall(head + b"Expect: 100-continue\r\n\r\n")
            assert sock.recv(1024) == b"HTTP/1.1 100 Continue\r\n\r\n"
            time.sleep(pause)  # the client's own pace, within its timeout: no synchronisation
            answer = exchange_on(sock, body)
        else:
            answer = exchange_on(sock, head + b"\r\n" + body)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"\r\n\r\n%d" % len(body))


# --------------------------------------------------------------------------- the parser's 400


def exchange_raw(port: int, sent: bytes) -> tuple[str, dict[str, str], bytes]:
    """Send these bytes, read until the server closes: the status line, headers and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(sent)
        received = read_until_closed(sock)
    head, _, body = received.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines)}
    return status, headers, body


@pytest.mark.parametrize(
    ("sent", "reason"),
    [
        (b"NOT AN HTTP REQUEST\r\n\r\n", "Invalid method encountered"),
        (b"get /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n", "Invalid method encountered"),
        (b"GET /v1/pets HTTP/1.1\r\nHost: x\r\nNo colon\r\n\r\n", "Invalid header token"),
        (
            b"GET /v1/pets HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "Invalid character in Content-Length",
        ),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "Invalid character in chunk size",
        ),
    ],
    ids=["not-http", "lower-case-method", "no-colon", "bad-length", "bad-chunk"],
)
def test_bytes_that_are_no_request_get_an_error_body_with_an_id(
    start_server: ServerFactory, sent: bytes, reason: str
) -> None:
    """Bytes the HTTP parser refuses get a 400 Error body saying why, with a request id."""
    server = start_server()
    status, headers, body = exchange_raw(server.port, sent)
    assert status == "HTTP/1.1 400 Bad Request"
    assert json.loads(body) == {
        "code": "validation_error",
        "message": f"Invalid HTTP request received: {reason}",
        "status": 400,
    }
    assert headers["content-type"] == "application/json"
    assert headers["content-length"] == str(len(body))
    assert headers["connection"] == "close"
    assert re.fullmatch("[0-9a-f]{32}", headers["x-request-id"])
    assert server.stop() in (0, -15)
    assert "Traceback" not in server.stderr  # the app of a bad chunk's request answers nothing


def test_a_content_length_past_64_bits_is_a_413(start_server: ServerFactory) -> None:
    """A Content-Length the parser can't hold is over any body limit: a 413 Error."""
    server = start_server()
    sent = POST_HEAD.replace(b"Content-Length: 100", b"Content-Length: %d" % 2**64)
    status, headers, body = exchange_raw(server.port, sent)
    assert (status, headers["content-type"], headers["connection"]) == (
        "HTTP/1.1 413 Request Entity Too Large",
        "application/json",
        "close",
    )
    assert json.loads(body) == {
        "code": "payload_too_large",
        "message": "Invalid HTTP request received: Content-Length overflow",
        "status": 413,
    }


# --------------------------------------------------------------------------- drop


def test_drop_closes_the_connection_without_an_answer(caplog: pytest.LogCaptureFixture) -> None:
    """`drop` ends the connection at once with nothing sent, and uvicorn answers nothing."""
    with serving() as port:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /drop HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_until_closed(sock) == b""  # its end, not a reset
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            assert client.get("/").text == "0"  # the next connection is served
    errors = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == []


def test_a_dropped_create_sees_the_connection_end_never_a_reset() -> None:
    """A client that sends its body after the head sees the connection end, never a reset."""
    # Closed with the body unread, the kernel would answer it with a reset, which can overtake the
    # end: httpx's ReadError instead of its RemoteProtocolError.
    seen = []
    with serving() as port:
        for _ in range(20):
            with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
                try:
                    client.post("/drop", content=b"R" * 20_000)
                except httpx.TransportError as error:
                    seen.append(type(error).__name__)
    assert seen == ["RemoteProtocolError"] * 20


# --------------------------------------------------------------------------- healthcheck


@contextlib.contextmanager
def answering(status: int, host: str = "127.0.0.1") -> Iterator[int]:
    """A plain HTTP server at `host` answering every GET with `status`: its port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass  # quiet

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("Server", (http.server.ThreadingHTTPServer,), {"address_family": family})
    with server_class((host, 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever)
        thread.start()
        try:
            yield server.server_address[1]
        finally:
            server.shutdown()
            thread.join()


@contextlib.contextmanager
def listening(serve: Any = None) -> Iterator[int]:
    """A socket that listens and, given `serve`, hands its first connection to it: its port."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        thread = None
        if serve is not None:
            thread = threading.Thread(target=lambda: serve(listener.accept()[0]), daemon=True)
            thread.start()
        yield listener.getsockname()[1]


def can_bind(host: str) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.create_server((host, 0), family=family):
            return True
    except OSError:
        return False


def test_healthcheck_passes_against_a_live_service(start_server: ServerFactory) -> None:
    """`python app.py healthcheck` exits 0, printing nothing, when /healthz answers 200."""
    server = start_server()
    argv = [sys.executable, "app.py", "healthcheck", "--port", str(server.port)]
    result = subprocess.run(
        argv, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_healthcheck_imports_nothing_of_the_service() -> None:
    """The healthcheck loads the standard library only: the image runs it every few seconds."""
    argv = [sys.executable, "-X", "importtime", "app.py", "healthcheck", "--port", str(free_port())]
    result = subprocess.run(
        argv, env=environment(), cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 1  # nothing listens there
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    heavy = {"uvicorn", "starlette", "msgspec", "asyncpg", "prometheus_client", "schemas"}
    assert not imported & heavy


def test_healthcheck_defaults_are_the_service_s() -> None:
    """Without flags or variables the healthcheck asks where the service listens by default."""
    assert (Settings().host, Settings().port) == (healthcheck.HOST, healthcheck.PORT)


ANY_AND_LOOPBACK = [
    ("0.0.0.0", "127.0.0.1"),  # noqa: S104 - the probe's case
    ("[127.0.0.1]", "127.0.0.1"),
    *([("::", "::1"), ("[::]", "::1"), ("[::1]", "::1")] if can_bind("::1") else []),
]


@pytest.mark.parametrize(("host", "loopback"), ANY_AND_LOOPBACK)
def test_healthcheck_probes_the_loopback_for_any_address(
    host: str, loopback: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--host 0.0.0.0 or :: probes that family's loopback; a host in brackets is the host."""
    with answering(200, loopback) as port:
        assert healthcheck.main(["--host", host, "--port", str(port)]) == 0
    assert capsys.readouterr() == ("", "")


def test_healthcheck_takes_the_variables_and_flags_win(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """PETSTORE_HOST and PETSTORE_PORT are read; --host and --port win over them."""
    with answering(200) as port:
        monkeypatch.setenv("PETSTORE_HOST", "127.0.0.1")
        monkeypatch.setenv("PETSTORE_PORT", str(port))
        assert healthcheck.main([]) == 0
        monkeypatch.setenv("PETSTORE_PORT", "1")
        assert healthcheck.main(["--port", str(port)]) == 0
    assert capsys.readouterr() == ("", "")


def test_healthcheck_ignores_the_service_s_other_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """The service's other flags can't fail the check: it reads the address only."""
    with answering(200) as port:
        argv = ["--api-key", "k", "--metrics", "sometimes", "--port", str(port), "--log-level=x"]
        assert healthcheck.main(argv) == 0
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--port", "{port}"], "http://127.0.0.1:{port}/healthz: [Errno 111] Connection refused"),
        (["--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
    ],
    ids=["nothing-listens", "port-not-a-number"],
)
def test_healthcheck_fails_in_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing listening, or a port that is none: exit 1 and one line saying what failed."""
    port = str(free_port())
    assert healthcheck.main([arg.format(port=port) for arg in argv]) == 1
    assert capsys.readouterr() == ("", f"petstore healthcheck: {line.format(port=port)}\n")


def test_healthcheck_fails_on_an_answer_other_than_200(capsys: pytest.CaptureFixture[str]) -> None:
    """Anything but 200 from /healthz: exit 1, the status in the line."""
    with answering(503) as port:
        assert healthcheck.main(["--port", str(port)]) == 1
    line = f"petstore healthcheck: http://127.0.0.1:{port}/healthz answered 503\n"
    assert capsys.readouterr() == ("", line)


def _say_nothing(connection: socket.socket) -> None:
    with connection:
        connection.recv(65536)
        connection.recv(65536)  # until the client leaves


def _trickle(connection: socket.socket) -> None:
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-pad: %s\r\n\r\n{}" % (b"p" * 20)
    with connection, contextlib.suppress(OSError):
        connection.recv(65536)
        for byte in answer:
            connection.sendall(bytes([byte]))
            time.sleep(0.2)  # the slow server itself, not a wait for something


def _late_body(connection: socket.socket) -> None:
    with connection, contextlib.suppress(OSError):
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{")
        time.sleep(3)  # the slow server itself, not a wait for something
        connection.sendall(b"}")


@pytest.mark.parametrize(
    "serve", [_say_nothing, _trickle, _late_body], ids=["no-answer", "trickle", "late-body"]
)
def test_healthcheck_s_2_s_are_the_whole_answer_s(
    serve: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """An answer, its body too, must come whole within 2 s, however it trickles in."""
    with listening(serve) as port:
        began = time.monotonic()
        assert healthcheck.main(["--port", str(port)]) == 1
        took = time.monotonic() - began
    line = f"petstore healthcheck: http://127.0.0.1:{port}/healthz: no whole answer within 2 s\n"
    assert capsys.readouterr() == ("", line)
    assert 2 <= took < 3


def test_healthcheck_says_in_one_line_what_a_server_that_is_no_http_one_sent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Something else on the port (an SSH server's greeting, with its line end): one line."""

    def greet(connection: socket.socket) -> None:
        with connection:
            connection.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")

    with listening(greet) as port:
        assert healthcheck.main(["--port", str(port)]) == 1
    line = f"petstore healthcheck: http://127.0.0.1:{port}/healthz: SSH-2.0-OpenSSH_9.2p1\n"
    assert capsys.readouterr() == ("", line)
