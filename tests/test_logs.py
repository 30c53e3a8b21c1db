"""The logs: the access log (text or JSON lines on stdout), the service's and uvicorn's lines on
stderr (JSON under --log-format json), and no key or password in any of them."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import create_app
from observability import JsonFormatter
from schemas import rfc3339
from settings import Settings, load_settings
from store import MemoryStore
from tests.conftest import (
    KEY,
    ROOT,
    Launcher,
    Server,
    ServerFactory,
    bearer,
    child_of,
    environment,
    free_port,
    serving,
    wait_until,
)

RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
ADMIN_KEY = "admin-key-9876543210"
WILMA = {"name": "Wilma", "categoryId": 3, "status": "pending"}
PASSWORD = "pa$$word-42"  # noqa: S105 - a database password the tests hide
ESCAPED_PASSWORD = 's3cr"et\\p\u00e4ss-42'  # noqa: S105 - one the lines escape on output


def quoted(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of `text` parsed as one JSON object (a line that is not one fails)."""
    objects = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(found, dict) for found in objects)
    return objects


def assert_redacted_line(line: str, log_format: str, request_id: str) -> None:
    """The access line of a GET /v1/pets/<a key> answered 400, its key redacted."""
    if log_format == "text":
        assert text_line("127.0.0.1", "GET /v1/pets/[redacted]", 400, request_id).fullmatch(line)
    else:
        (parsed,) = json_lines(line)
        expected = ("/v1/pets/[redacted]", 400, request_id)
        assert (parsed["path"], parsed["status"], parsed["requestId"]) == expected


def access_lines(text: str) -> list[dict[str, Any]]:
    """The access-log objects in `text`, but those of the readiness polls."""
    return [line for line in json_lines(text) if line["path"] != "/readyz"]


def text_line(client: str, request: str, status: int, request_id: str) -> re.Pattern[str]:
    """A whole text access-log line, any duration."""
    return re.compile(
        f'{re.escape(client)} "{re.escape(request)}" {status} [0-9]+us {re.escape(request_id)}'
    )


def seconds_ago(rfc3339_time: str) -> float:
    moment = time.strptime(rfc3339_time[:19], "%Y-%m-%dT%H:%M:%S")
    return time.time() - time.mktime(moment) + time.timezone  # mktime reads local time


# --------------------------------------------------------------------------- the access log


@pytest.mark.anyio
@pytest.mark.parametrize(
    "settings",
    [Settings(api_keys=(KEY,)), Settings(api_keys=(KEY,), log_format="json")],
    ids=["text", "json"],
)
async def test_access_log_lines_carry_the_contract_fields(
    client: httpx.AsyncClient, settings: Settings, read_access_log: Callable[[], str]
) -> None:
    """Each request is one line: client, method, path (no query), status, duration, request id."""
    # Under json an object with time, client, method, path, status, durationUs, requestId, in
    # that order.
    await client.get("/v1/pets?limit=5", headers={"X-Request-Id": "first"})
    await client.get("/v1/pets/1", headers={"Authorization": "", "X-Request-Id": "second"})
    written = read_access_log()
    if settings.log_format == "text":
        first, second = written.splitlines()
        assert text_line("127.0.0.1", "GET /v1/pets", 200, "first").fullmatch(first), first
        assert text_line("127.0.0.1", "GET /v1/pets/1", 401, "second").fullmatch(second), second
        return
    lines = json_lines(written)
    assert [list(line) for line in lines] == [
        ["time", "client", "method", "path", "status", "durationUs", "requestId"]
    ] * 2
    assert [
        {key: value for key, value in line.items() if key not in ("time", "durationUs")}
        for line in lines
    ] == [
        {
            "client": "127.0.0.1",
            "method": "GET",
            "path": "/v1/pets",
            "status": 200,
            "requestId": "first",
        },
        {
            "client": "127.0.0.1",
            "method": "GET",
            "path": "/v1/pets/1",
            "status": 401,
            "requestId": "second",
        },
    ]
    for line in lines:
        assert RFC3339_UTC.fullmatch(line["time"])
        assert -5 < seconds_ago(line["time"]) < 60
        assert isinstance(line["durationUs"], int)
        assert 0 <= line["durationUs"] < 10_000_000


@pytest.mark.anyio
async def test_a_path_can_t_write_a_line_of_its_own(
    client: httpx.AsyncClient, read_access_log: Callable[[], str]
) -> None:
    """A logged path has its line breaks, escapes and quotes escaped: one line a request."""
    # The path is logged decoded; a printable letter past ASCII stays as it is.
    forged = "1%0A6.6.6.6%20%22DELETE%20/v1/pets/1%22%20204%201us%20forged%1B[2J"
    await client.get(f"/v1/pets/{forged}", headers={"X-Request-Id": "forger"})
    await client.get("/v1/pets/1%22%20200%201us%20fake", headers={"X-Request-Id": "quoted"})
    await client.get("/v1/pets/caf%C3%A9", headers={"X-Request-Id": "printable"})
    lines = read_access_log().splitlines()
    expected = [
        ('GET /v1/pets/1\\n6.6.6.6 \\"DELETE /v1/pets/1\\" 204 1us forged\\x1b[2J', 404, "forger"),
        ('GET /v1/pets/1\\" 200 1us fake', 400, "quoted"),
        ("GET /v1/pets/café", 400, "printable"),
    ]
    assert len(lines) == len(expected), lines
    for line, (request, status, request_id) in zip(lines, expected, strict=True):
        assert text_line("127.0.0.1", request, status, request_id).fullmatch(line), line


SECRETS: dict[str, tuple[list[str], str]] = {
    "api-key": ([], KEY),
    "admin-key": ([], ADMIN_KEY),
    "password": (
        ["--database", f"postgresql://petstore:{quoted(PASSWORD)}@db.internal/petstore"],
        PASSWORD,
    ),
    "password-escaped-on-output": (
        ["--database", f"postgresql://petstore:{quoted(ESCAPED_PASSWORD)}@db.internal/petstore"],
        ESCAPED_PASSWORD,
    ),
    "password-in-the-query": (
        [
            "--database",
            f"postgresql://petstore@db.internal/petstore?sslmode=prefer&password={quoted(PASSWORD)}",
        ],
        PASSWORD,
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize(("flags", "secret"), list(SECRETS.values()), ids=list(SECRETS))
async def test_a_secret_in_a_path_is_redacted_in_the_access_log(
    log_format: str, flags: list[str], secret: str, read_access_log: Callable[[], str]
) -> None:
    """A key or the database password in a request's path is `[redacted]` in its line."""
    # Looked for as the line writes it too: text escapes a quote and a backslash, JSON its own.
    argv = ["--api-key", KEY, "--admin-key", ADMIN_KEY, "--log-format", log_format, *flags]
    petstore = create_app(load_settings(argv, {}), MemoryStore())
    async with serving(petstore) as client:
        await client.get(f"/v1/pets/{quoted(secret)}", headers={"X-Request-Id": "hider"})
    written = read_access_log()
    for form in (secret, quoted(secret), json.dumps(secret)[1:-1], secret.replace('"', '\\"')):
        assert form not in written
    (line,) = written.splitlines()
    assert_redacted_line(line, log_format, "hider")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("flags", "secret"),
    [SECRETS["password"], SECRETS["password-in-the-query"]],
    ids=["in-the-user-s-part", "in-the-query"],
)
async def test_the_journal_keeps_no_database_password(flags: list[str], secret: str) -> None:
    """The database password in a request's path and query is `[redacted]` in the journal."""
    petstore = create_app(
        load_settings(["--api-key", KEY, "--admin-key", ADMIN_KEY, *flags], {}), MemoryStore()
    )
    async with serving(petstore) as client:
        await client.get(f"/v1/pets/{quoted(secret)}", params={"q": secret})
        journal = await client.get("/_admin/requests", headers=bearer(ADMIN_KEY))
    for form in (secret, quoted(secret), json.dumps(secret)[1:-1]):
        assert form not in journal.text
    (entry,) = journal.json()["requests"]
    assert (entry["path"], entry["query"]) == ("/v1/pets/[redacted]", "q=[redacted]")


# --------------------------------------------------------------------------- the JSON format


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "1970-01-01T00:00:00.000000Z"),
        (1_796_083_199.999999, "2026-11-30T23:59:59.999999Z"),
        (1_796_083_200.123456, "2026-12-01T00:00:00.123456Z"),
    ],
)
def test_rfc3339_is_utc_to_the_microsecond(seconds: float, text: str) -> None:
    """The times of the JSON log lines and of the journal: RFC 3339, UTC, to the microsecond."""
    assert rfc3339(seconds) == text


def test_json_formatter_writes_time_level_logger_message_and_the_traceback() -> None:
    """A record with an exception: one JSON object, the traceback as text under exc_info."""
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord(
            "petstore", logging.ERROR, __file__, 1, "failed %s", ("here",), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert list(parsed) == ["time", "level", "logger", "message", "exc_info"]
    assert RFC3339_UTC.fullmatch(parsed["time"])
    assert (parsed["level"], parsed["logger"], parsed["message"]) == (
        "ERROR",
        "petstore",
        "failed here",
    )
    assert parsed["exc_info"].startswith("Traceback (most recent call last):")
    assert parsed["exc_info"].endswith("RuntimeError: boom")


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--log-format", "json", "--data", "."], {}, "data file"),
        (["--log-format", "json", "--host", "192.0.2.1"], {}, "cannot listen"),
        (["--log-format", "json", "--port", "abc"], {}, "--port: expected an integer"),
        (["--port", "abc", "--log-format=JSON"], {}, "--port: expected an integer"),
        (["--max-body", "0"], {"PETSTORE_LOG_FORMAT": "json"}, "--max-body: expected"),
        (["--log-format", "json", "--bogus"], {}, "unrecognized arguments"),
    ],
    ids=["data-file", "address", "a-setting", "flag-after", "variable", "unknown-flag"],
)
def test_a_start_that_fails_says_why_in_json(
    flags: list[str], env: dict[str, str], message: str
) -> None:
    """Under --log-format json the line that stops the start is a JSON object too."""
    # For the data file, the address, and a setting that can't be read, once the format itself
    # can be.
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--api-key", KEY, "--port", "0", *flags],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment(env),
        check=False,
    )
    assert result.returncode == 2, result.stderr
    (line,) = json_lines(result.stderr)
    assert line["level"] == "ERROR"
    assert RFC3339_UTC.fullmatch(line["time"])
    assert line["message"].startswith(message), line


@pytest.mark.parametrize("format_", ["text", "xml"])
def test_a_setting_refused_without_json_asked_is_a_line_of_text(format_: str) -> None:
    """Without JSON asked for, a refused setting is one line of text."""
    # A format that is none counts as JSON not asked for.
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--log-format", format_, "--port", "abc"],
        capture_output=True,
        text=True,
        timeout=30,
        env=environment(),
        check=False,
    )
    assert (result.returncode, result.stderr.splitlines()) == (
        2,
        ["petstore: --port: expected an integer from 0 to 65535, got 'abc'"],
    )


def test_uvicorn_lines_are_json_from_start_to_shutdown(start_server: ServerFactory) -> None:
    """Under json every stderr line is JSON, uvicorn's start-up and shutdown messages included."""
    # `python app.py --log-format json`; stdout is the ready line (text) then access-log objects.
    server = start_server("--log-format", "json")
    with server.client() as http:
        http.get("/v1/pets", headers={"X-Request-Id": "after-start"})
    server.wait_for_output("after-start")
    assert server.stop() in (0, -15)
    logs = json_lines(server.stderr)
    messages = [(line["level"], line["logger"], line["message"]) for line in logs]
    started = [message for _, _, message in messages]
    for expected in (
        "Started server process",
        "Application startup complete.",
        "Shutting down",
        "Application shutdown complete.",
        "Finished server process",
    ):
        assert any(message.startswith(expected) for message in started), started
    assert {logger for _, logger, _ in messages} == {"uvicorn.error"}
    assert all(RFC3339_UTC.fullmatch(line["time"]) for line in logs)
    ready, *access = server.stdout.splitlines()
    assert ready == f"petstore: ready at http://127.0.0.1:{server.port}/v1"
    assert [line["requestId"] for line in access_lines("\n".join(access))] == ["after-start"]


def test_generated_key_line_stays_text_under_json(start_server: ServerFactory) -> None:
    """Under json the generated-key and ready lines stay text; the service's own lines are JSON."""
    # Without a key; a harness reads those two lines.
    server = start_server("--log-format", "json", key=None)
    key_line, ready = server.stdout.splitlines()[:2]
    assert re.fullmatch(
        r"petstore: no API key configured; this run accepts: Bearer \S{32,}", key_line
    )
    assert ready == f"petstore: ready at http://127.0.0.1:{server.port}/v1"
    assert server.stop() in (0, -15)
    assert json_lines(server.stderr)


def test_uvicorn_app_under_json_writes_json_lines(launch: Launcher) -> None:
    """`uvicorn app:app` with PETSTORE_LOG_FORMAT=json writes uvicorn's lines and ours as JSON."""
    # uvicorn's own lines include its access log, on by default there.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    server = launch(argv, {"PETSTORE_LOG_FORMAT": "json", "PETSTORE_API_KEYS": KEY}, port)
    server.wait_ready()
    with server.client() as http:
        http.get("/healthz", headers={"X-Request-Id": "under-uvicorn"})
    server.wait_for_output("under-uvicorn")
    wait_until(lambda: "uvicorn.access" in server.stderr, "uvicorn's access line")
    assert server.stop() in (0, -15)
    loggers = {line["logger"] for line in json_lines(server.stderr)}
    assert loggers == {"uvicorn.error", "uvicorn.access"}
    assert [line["requestId"] for line in access_lines(server.stdout)] == ["under-uvicorn"]


def test_uvicorn_s_log_level_holds_under_json(launch: Launcher) -> None:
    """`uvicorn app:app --log-level warning` holds under PETSTORE_LOG_FORMAT=json."""
    # uvicorn's log level is uvicorn's there; our access log, on stdout, is our own.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--log-level"]
    server = launch(
        [*argv, "warning"], {"PETSTORE_LOG_FORMAT": "json", "PETSTORE_API_KEYS": KEY}, port
    )
    server.wait_ready()
    with server.client() as http:
        http.get("/healthz", headers={"X-Request-Id": "at-warning"})
    server.wait_for_output("at-warning")
    assert server.stop() in (0, -15)
    assert json_lines(server.stderr) == []


# --------------------------------------------------------------------------- no key in any line


def test_no_key_in_any_line_after_refusals_and_a_failed_write(
    tmp_path: Path, launch: Launcher
) -> None:
    """No key appears in any output line after refusals and a failed write; all but one are JSON."""
    # Started with an API key, an admin key and a data file whose second fdatasync fails (strace):
    # after creates, 401s with and without keys, keys in queries, paths and bodies, and the failed
    # create, neither key appears in stdout or stderr, and every line but the ready line is JSON,
    # the storage error included.
    api_key, admin_key = "api-key-b5f0c1d2e3", "admin-key-f9e8d7c6b5"
    port = free_port()
    argv = [
        "strace",
        "-f",
        "-qq",
        "-o",
        "/dev/null",
        "-e",
        "trace=fdatasync",
        "-e",
        "inject=fdatasync:error=EIO:when=2",
        sys.executable,
        str(ROOT / "app.py"),
        "--port",
        str(port),
        "--log-format",
        "json",
        "--data",
        str(tmp_path / "pets.jsonl"),
        "--api-key",
        api_key,
        "--admin-key",
        admin_key,
    ]
    server = launch(argv, {}, port)
    try:
        _refusals_and_a_failed_write_leave_no_key(server, api_key, admin_key)
    finally:  # `launch` stops strace, which would leave the service it traces running
        if server.process.poll() is None:
            os.kill(child_of(server.process.pid), signal.SIGKILL)


def _refusals_and_a_failed_write_leave_no_key(server: Server, api_key: str, admin_key: str) -> None:
    server.wait_ready()
    good = {"Authorization": f"Bearer {api_key}"}
    with server.client() as http:
        assert http.post("/v1/pets", json=WILMA, headers=good).status_code == 201
        assert http.post("/v1/pets", json=WILMA, headers=good).status_code == 503
        assert (
            http.get("/v1/pets", headers={"Authorization": f"Bearer {admin_key}"}).status_code
            == 401
        )
        assert http.get("/_admin/requests", headers=good).status_code == 401
        assert http.get(f"/v1/pets?key={api_key}").status_code == 401
        assert http.get(f"/v1/pets/{api_key}", headers=good).status_code == 400
        assert http.get(f"/{admin_key}", headers={"X-Request-Id": api_key}).status_code == 404
        body = {"name": api_key, "categoryId": admin_key}
        assert http.post("/v1/pets", json=body, headers=good).status_code == 400
        assert http.get("/metrics", headers={"X-Request-Id": "last"}).status_code == 200
    server.wait_for_output('"requestId":"last"')
    wait_until(lambda: "fsync failed" in server.stderr, "the storage error in the log")
    output = server.stdout + server.stderr
    assert api_key not in output
    assert admin_key not in output
    ready, *access = server.stdout.splitlines()
    assert ready == f"petstore: ready at http://127.0.0.1:{server.port}/v1"
    lines = access_lines("\n".join(access))
    assert [line["status"] for line in lines] == [201, 503, 401, 401, 401, 400, 404, 400, 200]
    assert (lines[5]["path"], lines[6]["path"]) == ("/v1/pets/[redacted]", "/[redacted]")
    assert lines[6]["requestId"] == "[redacted]"
    errors = [line for line in json_lines(server.stderr) if line["level"] == "ERROR"]
    assert {line["logger"] for line in errors} == {"petstore"}
    assert any("fsync failed: Input/output error" in line["message"] for line in errors), errors


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_no_key_in_uvicorn_s_trace_lines(start_server: ServerFactory, log_format: str) -> None:
    """At --log-level trace a key in a request's path, query or id is [redacted] in every line."""
    # uvicorn writes each request's scope (its path, query and headers) at that level.
    server = start_server(
        "--log-level", "trace", "--log-format", log_format, "--admin-key", ADMIN_KEY
    )
    with server.client() as http:
        http.get(f"/v1/pets/{KEY}", params={"k": ADMIN_KEY}, headers={"X-Request-Id": KEY})
    server.wait_for_output("/v1/pets/[redacted]")
    assert server.stop() in (0, -15)
    assert "[redacted]" in server.stderr
    for secret in (KEY, ADMIN_KEY):
        assert secret not in server.stdout + server.stderr
    (line,) = [line for line in server.stdout.splitlines() if "/v1/pets/" in line]
    assert_redacted_line(line, log_format, "[redacted]")


def test_no_key_in_uvicorn_s_access_log_under_uvicorn_app(launch: Launcher) -> None:
    """`uvicorn app:app` keeps uvicorn's access log, and a key in a query is [redacted] in it."""
    # In text; uvicorn's access log is on by default there.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    server = launch(argv, {"PETSTORE_API_KEYS": KEY}, port)
    server.wait_ready()
    with server.client() as http:
        http.get("/nothing", params={"token": KEY})
        http.get("/last")
    wait_until(
        lambda: '"GET /last HTTP/1.1"' in server.stdout + server.stderr, "uvicorn's last line"
    )
    assert server.stop() in (0, -15)
    output = server.stdout + server.stderr
    assert '"GET /nothing?token=[redacted] HTTP/1.1" 404' in output
    assert KEY not in output


# --------------------------------------------------------------------------- a reader that stops


def test_a_reader_that_stops_reading_never_stops_the_service() -> None:
    """A harness that reads the ready line and never reads again never stops the service."""
    # With stdout (the access log) full, every request is still answered and SIGTERM still ends
    # the process.
    process = subprocess.Popen(
        [sys.executable, "app.py", "--port", "0", "--api-key", KEY],
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().decode().split("ready at ")[1].strip()
        with httpx.Client(base_url=base_url, headers=bearer(KEY), timeout=5) as http:
            long_id = {"X-Request-Id": "i" * 128}  # 128 + 60 bytes of access line each
            statuses = {http.get("/pets/1", headers=long_id).status_code for _ in range(1500)}
            assert statuses == {404}
            assert http.get(base_url.removesuffix("/v1") + "/healthz").status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) in (0, -15)
    finally:
        process.kill()
        process.communicate()
