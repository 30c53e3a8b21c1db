"""--log-format json: the access log's lines and every log line (uvicorn's included) one JSON
object each; no key in any line."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

import logs
from accesslines import as_text, one_field_clients
from accesslog import AccessLog
from app import Petstore, create_app
from logs import JsonFormatter, Outlet, Redact
from schemas import rfc3339
from settings import Settings
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
JSON_LOGS = Settings(api_keys=(KEY,), log_format="json")
ADMIN_KEY = "admin-key-9876543210"
WILMA = {"name": "Wilma", "categoryId": 3, "status": "pending"}


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of `text` parsed as one JSON object (a line that is not one fails)."""
    objects = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(found, dict) for found in objects)
    return objects


def access_lines(text: str) -> list[dict[str, Any]]:
    """The access-log objects in `text`, but those of the readiness polls."""
    return [line for line in json_lines(text) if line["path"] != "/readyz"]


def seconds_ago(rfc3339: str) -> float:
    moment = time.strptime(rfc3339[:19], "%Y-%m-%dT%H:%M:%S")
    return time.time() - time.mktime(moment) + time.timezone  # mktime reads local time


@pytest.mark.anyio
@pytest.mark.parametrize("settings", [JSON_LOGS], ids=["json"])
async def test_access_log_json_lines_carry_the_contract_fields(
    client: httpx.AsyncClient, app: Petstore, access_log: io.StringIO
) -> None:
    """Under json each request is one object with the contract's fields, in their order."""
    # The fields: time, client, method, path (no query), status, durationUs, requestId, in that
    # order.
    await client.get("/v1/pets?limit=5", headers={"X-Request-Id": "first"})
    await client.get("/v1/pets/1", headers={"Authorization": "", "X-Request-Id": "second"})
    app.access_log.flush()
    lines = json_lines(access_log.getvalue())
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


@pytest.mark.parametrize(
    ("time_ns", "text"),
    [
        (0, "1970-01-01T00:00:00.000000Z"),
        (1_796_083_199_999_999_999, "2026-11-30T23:59:59.999999Z"),  # cut, not rounded up
        (1_796_083_200_000_000_999, "2026-12-01T00:00:00.000000Z"),  # the next second's text
        (1_796_083_200_123_456_789, "2026-12-01T00:00:00.123456Z"),
    ],
)
def test_rfc3339_is_utc_to_the_microsecond(time_ns: int, text: str) -> None:
    """The times of the JSON log lines and of the journal, each second's text made once."""
    assert rfc3339(time_ns) == text


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


def test_json_formatter_writes_a_name_that_is_not_utf8() -> None:
    """A file name from bytes that are not UTF-8 is written escaped, in one JSON line."""
    # Python reads such bytes as a lone surrogate. It was a traceback of the logging module, the
    # line lost.
    record = logging.LogRecord(
        "petstore.store", logging.WARNING, __file__, 1, "%s: dropped", ("/d/\udcff.jsonl",), None
    )
    assert json.loads(JsonFormatter().format(record))["message"] == "/d/\\udcff.jsonl: dropped"


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (["--log-format", "json", "--data", "."], {}, "data file"),
        (["--log-format", "json", "--host", "192.0.2.1"], {}, "cannot listen"),
        (["--log-format", "json", "--port", "abc"], {}, "--port: expected an integer"),
        (["--port", "abc", "--log-format=JSON"], {}, "--port: expected an integer"),
        (["--max-body", "0"], {"PETSTORE_LOG_FORMAT": "json"}, "--max-body: expected"),
        (["--log-format", "json", "--bogus"], {}, "1 unknown argument, not shown"),
    ],
    ids=["data-file", "address", "a-setting", "flag-after", "variable", "unknown-flag"],
)
def test_a_start_that_fails_says_why_in_json(
    flags: list[str], env: dict[str, str], message: str
) -> None:
    """Under --log-format json the line that stops the start is a JSON object too."""
    # For the data file, the address, and a setting that can't be read, once the format itself can
    # be. It was a line of text.
    result = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--api-key", KEY, *flags],
        capture_output=True,
        text=True,
        timeout=30,
        env={**environment(), **env},
        check=False,
    )
    assert result.returncode == 2
    (line,) = json_lines(result.stderr)
    assert (line["level"], line["logger"]) == ("ERROR", "petstore")
    assert line["message"].startswith(message)


@pytest.mark.parametrize("format_", ["text", "xml"])
def test_a_setting_refused_without_json_asked_is_a_line_of_text(format_: str) -> None:
    """Without JSON asked for, a refused setting is one line of text, as it always was."""
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
        "Uvicorn running on",
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
    assert key_line.startswith("petstore: no API key configured; this run accepts: Bearer ")
    assert ready.startswith("petstore: ready at http://127.0.0.1:")
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
    # The app's logging set-up, at its import, had put uvicorn's loggers back to INFO.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--log-level"]
    server = launch(
        [*argv, "warning"], {"PETSTORE_LOG_FORMAT": "json", "PETSTORE_API_KEYS": KEY}, port
    )
    server.wait_ready()
    with server.client() as http:
        http.get("/healthz", headers={"X-Request-Id": "at-warning"})
    server.wait_for_output("at-warning")  # our access log, on stdout: its own switch
    assert server.stop() in (0, -15)
    assert json_lines(server.stderr) == []


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
    assert ready.startswith("petstore: ready at ")
    lines = access_lines("\n".join(access))
    assert [line["status"] for line in lines] == [201, 503, 401, 401, 401, 400, 404, 400, 200]
    assert (lines[5]["path"], lines[6]["path"]) == ("/v1/pets/[redacted]", "/[redacted]")
    assert lines[6]["requestId"] == "[redacted]"
    errors = [line for line in json_lines(server.stderr) if line["level"] == "ERROR"]
    assert [line["logger"] for line in errors] == ["petstore.store"]
    assert "fsync failed: Input/output error" in errors[0]["message"]


@pytest.mark.anyio
async def test_draining_the_access_log_takes_turns_with_requests(
    app: Petstore, access_log: io.StringIO
) -> None:
    """The access log's flush writes a chunk at a time, yielding between chunks, and writes all."""
    # The lifespan's half-second flush; requests waiting meanwhile are not held up.
    lines = 10_000
    app.access_log.entries = [
        (("127.0.0.1", 5000), "GET", "/v1/pets", 200, 412_000, (b"x-request-id", b"id-%d" % n), 0)
        for n in range(lines)
    ]
    turns = 0
    drained = asyncio.Event()

    async def another_request() -> None:
        nonlocal turns
        while not drained.is_set():
            turns += 1
            await asyncio.sleep(0)

    waiting = asyncio.create_task(another_request())
    await app.access_log.drain()
    drained.set()
    await waiting
    assert turns >= lines // 256
    written = access_log.getvalue().splitlines()
    assert len(written) == lines
    assert written[-1] == f'127.0.0.1 "GET /v1/pets" 200 412us id-{lines - 1}'


@pytest.mark.anyio
async def test_the_lifespan_end_writes_the_lines_of_the_drain_it_cut_off(
    app: Petstore, access_log: io.StringIO
) -> None:
    """At the lifespan's end, the lines of entries the cancelled drain had taken are written too."""
    # The lifespan's end cancels the task that drains the access log. Over the memory store, whose
    # close awaits nothing, the flush ran before the cancelled drain put them back, and they were
    # never written.
    lines = 2_000
    app.access_log.entries = [
        (("127.0.0.1", 5000), "GET", "/v1/pets", 200, 412_000, (b"x-request-id", b"id-%d" % n), 0)
        for n in range(lines)
    ]
    async with app.router.lifespan_context(app):
        # Until the drain task took them (it formats a chunk a turn); it sets no event.
        while app.access_log.entries:  # noqa: ASYNC110
            await asyncio.sleep(0)
    written = access_log.getvalue().splitlines()
    assert [line.rpartition(" ")[2] for line in written] == [f"id-{n}" for n in range(lines)]


def test_a_refusal_s_json_line_has_null_for_the_method_and_path_it_never_gave() -> None:
    """A server's own 400 to unparsable bytes has null method and path in its JSON line."""
    # As for an unknown client; the text line has `-`. The JSON line had "-".
    stream = io.StringIO()
    log = AccessLog(None, stream, json_lines=True)  # type: ignore[arg-type]
    log.note_refusal(("127.0.0.1", 5000), b"sent-1", 35_000)
    log.flush()
    (line,) = json_lines(stream.getvalue())
    assert (line["method"], line["path"], line["status"]) == (None, None, 400)
    assert (line["durationUs"], line["requestId"]) == (35, "sent-1")


@pytest.mark.anyio
async def test_made_request_ids_count_up_past_a_block_of_them(client: httpx.AsyncClient) -> None:
    """Made request ids are the process's prefix and a hex counter, none repeated past a block."""
    # A request without a usable X-Request-Id gets the process's prefix and a hex counter one more
    # than the last made, also past the 256 ids made at a time.
    made = [
        (await client.get("/healthz", headers={"X-Request-Id": "not one"})).headers["x-request-id"]
        for _ in range(600)
    ]
    prefix, _, first = made[0].partition("-")
    assert re.fullmatch(r"[0-9a-f]{8}", prefix)
    start = int(first, 16)
    assert made == [f"{prefix}-{start + number:x}" for number in range(600)]


def test_redact_keeps_every_secret_out_of_a_record() -> None:
    """A secret anywhere in a log record comes out [redacted]; a record without one is unchanged."""
    # Anywhere: in the message, in a str argument (kept a tuple, as uvicorn's access formatter reads
    # it), in another kind of argument (a scope's bytes) or in an exception's text.
    redact = Redact([KEY, ADMIN_KEY, ""])

    def formatted(msg: str, args: tuple[object, ...], exc: Exception | None = None) -> str:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, msg, args, None)
        if exc is not None:
            record.exc_info = (type(exc), exc, None)
        assert redact.filter(record) is True
        return logging.Formatter().format(record)

    assert formatted(f"error in GET /v1/pets/{KEY}", ()) == "error in GET /v1/pets/[redacted]"
    access = formatted('%s - "%s %s" %d', ("127.0.0.1", "GET", f"/x?k={ADMIN_KEY}", 404))
    assert access == '127.0.0.1 - "GET /x?k=[redacted]" 404'
    scope = formatted("scope=%s", ({"path": f"/{KEY}".encode()},))
    assert scope == "scope={'path': b'/[redacted]'}"
    failed = formatted("failed", (), ValueError(f"no pet {ADMIN_KEY}"))
    assert failed == "failed\nValueError: no pet [redacted]"
    assert formatted("GET %s %d", ("/v1/pets", 200)) == "GET /v1/pets 200"
    # Percent-encoded, any character of it: the line is given decoded, the secret redacted.
    encoded = KEY.replace("-", "%2D").replace("0", "%30")
    access = formatted('%s - "%s %s" %d', ("127.0.0.1", "GET", f"/x?k={encoded}&q=a+b", 404))
    assert access == '127.0.0.1 - "GET /x?k=[redacted]&q=a+b" 404'
    spaced = Redact(["one two three four"])
    assert spaced.redact("q=one+two+three+four&x=%7E") == "q=[redacted]&x=~"
    trace = formatted("scope=%s", ({"query_string": f"k={encoded}".encode()},))
    assert trace == "scope={'query_string': b'k=[redacted]'}"
    assert formatted("%d%% done, 100%% sure", (50,)) == "50% done, 100% sure"
    # Given decoded, a line writes no line break or terminal escape a client encoded beside.
    forged = formatted("GET %s", (f"/x?k={encoded}&a=%0A127.0.0.1 forged%1B[2J",))
    assert forged == "GET /x?k=[redacted]&a=\\x0a127.0.0.1 forged\\x1b[2J"


def test_redacting_twice_leaves_the_marks_alone() -> None:
    """Redacting a line twice leaves the marks alone, even for a key that is a piece of the mark."""
    # A line goes through the filter in pieces and whole (its message, its arguments, the two put
    # together): a key that is a piece of the mark itself (`e`, `act`) was found again inside the
    # marks already written (`k[r[redacted]dact[redacted]d]y` for "key").
    expected = {
        "e": "k[redacted]y [redacted] and [redacted]",
        "act": "key [redacted] and [redacted]",
        "[redacted]": "key [redacted] and [redacted]",
    }
    for key, line in expected.items():
        redact = Redact([KEY, key])
        record = logging.LogRecord(
            "t", logging.INFO, __file__, 1, "key %s and %s", (key, KEY), None
        )
        assert redact.filter(record) is True
        assert record.getMessage() == line
        assert redact.redact(line) == line


@pytest.mark.anyio
async def test_the_database_password_is_kept_out_of_the_access_log_and_the_journal() -> None:
    """The database password sent by a client is `[redacted]` in the access log and the journal."""
    # Sent as the URL writes it, or decoded, in a path, a query or a request id; redacted as the
    # keys are.
    settings = Settings(
        api_keys=(KEY,),
        admin_keys=(ADMIN_KEY,),
        database="postgresql://petstore:pa%24%24word-42@db.internal/petstore",
    )
    access_log = io.StringIO()
    petstore = create_app(settings, MemoryStore(), access_log=access_log)
    async with serving(petstore) as client:
        await client.get("/v1/pets/pa$$word-42")
        await client.get("/v1/pets?name=pa%24%24word-42", headers={"X-Request-Id": "pa$$word-42"})
        journal = await client.get("/_admin/requests", headers=bearer(ADMIN_KEY))
    petstore.access_log.flush()
    written = access_log.getvalue() + journal.text
    assert "pa$$word-42" not in written
    assert "pa%24%24word-42" not in written
    lines = access_log.getvalue().splitlines()
    assert lines[0].split('"')[1] == "GET /v1/pets/[redacted]"
    assert lines[1].endswith(" [redacted]")
    entries = journal.json()["requests"]
    assert [entry["path"] for entry in entries] == ["/v1/pets/[redacted]", "/v1/pets"]
    assert entries[1]["query"] == "name=[redacted]"
    assert entries[1]["requestId"] == "[redacted]"


@pytest.mark.anyio
@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_key_percent_encoded_in_a_request_id_is_redacted(log_format: str) -> None:
    """A request id that hides a key in its percent-encoding is `[redacted]` in line and journal."""
    # No one decodes a request id: it went out as sent, where the journal's copy of the header was
    # redacted.
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), log_format=log_format)
    access_log = io.StringIO()
    petstore = create_app(settings, MemoryStore(), access_log=access_log)
    hidden = [KEY.replace("-", "%2D"), "".join(f"%{byte:02X}" for byte in KEY.encode())]
    async with serving(petstore) as client:
        echoed = [
            (await client.get("/v1/pets", headers={"X-Request-Id": sent})).headers["x-request-id"]
            for sent in hidden
        ]
        journal = await client.get("/_admin/requests", headers=bearer(ADMIN_KEY))
    petstore.access_log.flush()
    written = access_log.getvalue()
    assert echoed == hidden  # the client's own id, as it sent it
    assert not any(sent in written + journal.text for sent in hidden)
    if log_format == "json":
        ids = [line["requestId"] for line in access_lines(written) if line["path"] == "/v1/pets"]
    else:
        ids = [line.split()[-1] for line in written.splitlines() if '"GET /v1/pets"' in line]
    assert ids == ["[redacted]", "[redacted]"]
    assert [entry["requestId"] for entry in journal.json()["requests"]] == ["[redacted]"] * 2


def test_x_forwarded_for_is_taken_only_from_the_proxies_named(start_server: ServerFactory) -> None:
    """A client's address comes from X-Forwarded-For only from FORWARDED_ALLOW_IPS's proxies."""
    # uvicorn's default took it from the loopback, at the cost of a look through every request's
    # headers from there.
    for env, client in (({}, "127.0.0.1"), ({"FORWARDED_ALLOW_IPS": "127.0.0.1"}, "203.0.113.7")):
        server = start_server(env=env)
        with server.client() as http:
            assert http.get("/nope", headers={"X-Forwarded-For": "203.0.113.7"}).status_code == 404
        output = server.wait_for_output('"GET /nope" 404 ')
        assert f'\n{client} "GET /nope" 404 ' in output


@pytest.mark.parametrize(
    "address", ["1.2.3.4 x", '1.2.3.4"x', "1.2.3.4\tx", "1.2.3.4\x85x", "1.2.3.4\\x1b[31m"]
)
def test_an_address_alone_in_its_chunk_is_made_one_field(address: str) -> None:
    """A client's address that is not one printable field is escaped, alone in its chunk too."""
    # Past ASCII (`\x85`, a line break to str.splitlines) it went out raw unless another line of
    # its chunk had the chunk looked at.
    entry = ((address, 1), "GET", "/nope", 404, 1_000, (b"x-request-id", b"i"), 0)
    line = one_field_clients(as_text([entry]), [entry])
    field, rest = line.split(" ", 1)
    assert rest == '"GET /nope" 404 1us i\n'
    assert field.isprintable()
    assert field != address  # escaped: a backslash written as is would pass for an escape


@pytest.mark.parametrize("under", ["python", "uvicorn"])
def test_a_client_s_address_is_one_field_of_the_text_line(launch: Launcher, under: str) -> None:
    """An X-Forwarded-For address is one field of a text line, and hides no key encoded."""
    # Escaped when it has a space, a tab, a quote or a character past ASCII; `[redacted]` when it
    # percent-encodes a key. Taken from a proxy (FORWARDED_ALLOW_IPS; under `uvicorn app:app`,
    # its default, the loopback) as written, it put a method, a path, a status and an id of its
    # own in front of the line's.
    port = free_port()
    start = [sys.executable, "app.py"] if under == "python" else [sys.executable, "-m", "uvicorn"]
    argv = [*start, *(["app:app"] if under == "uvicorn" else []), "--port", str(port)]
    env = {"PETSTORE_API_KEYS": KEY, "FORWARDED_ALLOW_IPS": "127.0.0.1"}
    server = launch(argv, env, port)
    server.wait_ready()
    forged = [
        '6.6.6.6 "GET /v1/pets" 200 1us forged',
        '1.2.3.4\t"x',
        "1.2.3.4\x85x",
        KEY.replace("-", "%2D"),
    ]
    with server.client() as http:
        for address in forged:
            headers = {b"X-Forwarded-For": address.encode("latin-1")}
            assert http.get("/nope", headers=headers).status_code == 404
    wait_until(lambda: server.stdout.count('"GET /nope" 404 ') == 4, "the four lines")
    lines = [line for line in server.stdout.splitlines() if '"GET /nope"' in line]
    assert [line.split(" ", 1)[0] for line in lines] == [
        '6.6.6.6\\x20\\"GET\\x20/v1/pets\\"\\x20200\\x201us\\x20forged',
        '1.2.3.4\\t\\"x',
        "1.2.3.4\\x85x",
        "[redacted]",
    ]
    assert all(len(line.split()) == 6 for line in lines)
    assert server.stop() in (0, -15)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "database",
    [
        "postgresql://petstore:pa%C3%A9%24word-42@db.internal/petstore",
        "postgresql://petstore@db.internal/petstore?sslmode=prefer&password=pa%C3%A9%24word-42",
    ],
    ids=["in-the-user-s-part", "in-the-query"],
)
async def test_a_password_past_ascii_or_in_the_query_is_kept_out_too(database: str) -> None:
    """A password past ASCII, or the URL's `password`, is `[redacted]` in the log and journal."""
    # A password with a letter past ASCII, sent raw in a header (whose bytes the journal reads as
    # Latin-1) or in the query; and one given as the URL's `password` parameter, which the driver
    # takes as well: `[redacted]` in the access log and the journal all the same.
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), database=database)
    secret = "paé$word-42"  # noqa: S105 - the password the URLs hold
    access_log = io.StringIO()
    petstore = create_app(settings, MemoryStore(), access_log=access_log)
    async with serving(petstore) as client:
        await client.get(
            f"/v1/pets/{secret}",
            headers={b"X-Note": secret.encode()},  # its UTF-8, raw
            params={"q": secret},
        )
        journal = await client.get("/_admin/requests", headers=bearer(ADMIN_KEY))
    petstore.access_log.flush()
    written = access_log.getvalue() + journal.text
    for form in (secret, secret.encode().decode("latin-1"), "pa%C3%A9%24word-42"):
        assert form not in written
        assert json.dumps(form)[1:-1] not in written  # as JSON writes it
    (entry,) = journal.json()["requests"]
    assert (entry["path"], entry["query"]) == ("/v1/pets/[redacted]", "q=[redacted]")
    assert entry["headers"]["x-note"] == "[redacted]"


@pytest.mark.anyio
@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_a_password_the_lines_escape_is_still_redacted(log_format: str) -> None:
    """A password the log lines escape is still redacted, looked for as they write it."""
    # A password with a quote, a backslash and a letter past ASCII in a path: the text log escapes
    # that path and JSON escapes its own. It was redacted only as sent, and went out escaped.
    escaped_on_output = 's3cr"et\\p\u00e4ss-42'
    settings = Settings(
        api_keys=(KEY,),
        database=f"postgresql://petstore:{urllib.parse.quote(escaped_on_output)}@db.internal/petstore",
        log_format=log_format,
    )
    access_log = io.StringIO()
    petstore = create_app(settings, MemoryStore(), access_log=access_log)
    async with serving(petstore) as client:
        await client.get(f"/v1/pets/{urllib.parse.quote(escaped_on_output)}")
    petstore.access_log.flush()
    (line,) = access_log.getvalue().splitlines()
    path = line.split('"')[1] if log_format == "text" else json.loads(line)["path"]
    assert path.endswith("/v1/pets/[redacted]"), line
    assert "s3cr" not in line


def test_no_key_in_uvicorn_s_trace_lines(start_server: ServerFactory) -> None:
    """At --log-level trace a key in a request's path or query is [redacted], in text and JSON."""
    # uvicorn writes each request's scope (its path and query) at that level.
    for log_format in ("text", "json"):
        server = start_server(
            "--log-level", "trace", "--log-format", log_format, "--admin-key", ADMIN_KEY
        )
        with server.client() as http:
            http.get(f"/v1/pets/{KEY}", params={"k": ADMIN_KEY})
        server.wait_for_output('/v1/pets/[redacted]"')
        assert server.stop() in (0, -15)
        assert "[redacted]" in server.stderr
        for secret in (KEY, ADMIN_KEY):
            assert secret not in server.stdout + server.stderr, log_format


def test_no_key_in_uvicorn_s_access_log_under_uvicorn_app(launch: Launcher) -> None:
    """`uvicorn app:app` keeps uvicorn's access log, and a key in a query is [redacted] in it."""
    # In text; uvicorn's access log is on by default there.
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)]
    server = launch(argv, {"PETSTORE_API_KEYS": KEY}, port)
    server.wait_ready()
    encoded = "".join(f"%{byte:02X}" for byte in KEY.encode())  # each character encoded
    with server.client() as http:
        http.get("/nothing", params={"token": KEY})
        http.get(f"/encoded?token={encoded}")
        http.get(f"/encoded/{encoded}")
    wait_until(lambda: "/encoded/" in server.stdout + server.stderr, "uvicorn's lines")
    assert server.stop() in (0, -15)
    output = server.stdout + server.stderr
    assert '"GET /nothing?token=[redacted] HTTP/1.1" 404' in output
    assert '"GET /encoded?token=[redacted] HTTP/1.1" 404' in output
    assert '"GET /encoded/[redacted] HTTP/1.1" 404' in output
    assert KEY not in output
    assert encoded not in output


@pytest.mark.anyio
async def test_a_path_can_t_write_a_line_of_its_own(
    client: httpx.AsyncClient, read_access_log: Callable[[], str]
) -> None:
    """A logged path has line breaks, escapes, quotes and backslashes escaped: a line a request."""
    # The path is logged decoded: a line break or a terminal's escape in it is written escaped; so
    # are a quote and a backslash, so that no client writes fields of its own within its quotes
    # (`\x41` as sent is told from the escape of a character); a printable letter stays as it is
    # beside them.
    forged = "1%0A6.6.6.6%20%22DELETE%20/v1/pets/1%22%20204%201us%20forged%1B[2J"
    await client.get(f"/v1/pets/{forged}", headers={"X-Request-Id": "forger"})
    await client.get("/v1/pets/caf%C3%A9", headers={"X-Request-Id": "printable"})
    await client.get("/v1/pets/1%22%20200%201us%20fake", headers={"X-Request-Id": "quoted"})
    await client.get("/v1/pets/%5Cx41", headers={"X-Request-Id": "backslash"})
    await client.get("/v1/pets/caf%C3%A9%0A%E2%80%AE", headers={"X-Request-Id": "both"})
    lines = read_access_log().splitlines()
    assert lines == [
        '127.0.0.1 "GET /v1/pets/1\\n6.6.6.6 \\"DELETE /v1/pets/1\\" 204 1us forged\\x1b[2J" '
        f"404 {lines[0].split()[-2]} forger",
        f'127.0.0.1 "GET /v1/pets/café" 400 {lines[1].split()[-2]} printable',
        f'127.0.0.1 "GET /v1/pets/1\\" 200 1us fake" 400 {lines[2].split()[-2]} quoted',
        f'127.0.0.1 "GET /v1/pets/\\\\x41" 400 {lines[3].split()[-2]} backslash',
        f'127.0.0.1 "GET /v1/pets/café\\n\\u202e" 400 {lines[4].split()[-2]} both',
    ]


@pytest.mark.parametrize("char", ['"', "\\", "\n", "\x7f", "\x1b", "\x00"])
def test_an_ascii_chunk_s_paths_are_checked_byte_by_byte(char: str) -> None:
    """In an all-ASCII chunk a control, quote or backslash in a path is found, that path escaped."""
    # A chunk whose paths are all ASCII is checked in one go, without isprintable; only that path is
    # escaped.
    entry = (("127.0.0.1", 1), "GET", "/v1/pets", 200, 1_000, (b"x-request-id", b"i"), 0)
    odd = (("127.0.0.1", 1), "GET", f"/v1/pets/{char}", None, 2_000, (b"x-request-id", b"j"), 0)
    text = as_text([entry, odd, entry])
    escaped = repr(char)[1:-1] if char not in '"\\' else "\\" + char
    assert text.splitlines() == [
        '127.0.0.1 "GET /v1/pets" 200 1us i',
        f'127.0.0.1 "GET /v1/pets/{escaped}" - 2us j',
        '127.0.0.1 "GET /v1/pets" 200 1us i',
    ]


def test_a_reader_that_stops_reading_never_stops_the_service() -> None:
    """A reader that stops reading the pipes never stops the service, nor SIGTERM ending it."""
    # The README's fixture: a harness reads the ready line from a pipe and never reads again. With
    # stdout (the access log) and stderr (uvicorn's trace lines) both full, every request is still
    # answered and SIGTERM still ends the process, within the 2 s its logs wait for a reader: they
    # wait in their Outlets, then drop what passes their limit. (Writing them directly, the first
    # full pipe stops the event loop: no answer, and SIGTERM unheard.)
    process = subprocess.Popen(
        [sys.executable, "app.py", "--port", "0", "--api-key", KEY, "--log-level", "trace"],
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().decode().split("ready at ")[1].strip()
        with httpx.Client(base_url=base_url, headers=bearer(KEY), timeout=5) as http:
            long_id = {"X-Request-Id": "i" * 128}  # 128 + 60 bytes of access line each
            statuses = {http.get("/pets/1", headers=long_id).status_code for _ in range(1500)}
            assert statuses == {404}
            assert http.get(base_url.removesuffix("/v1") + "/healthz").status_code == 200
        began = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(15) == 0
        # The logs' 2 s at exit in all, not twice (before uvicorn's signal, and at exit).
        assert time.monotonic() - began < 3.8
    finally:
        process.kill()
        process.communicate()


class _StalledReader(io.StringIO):
    """A stream whose reader takes nothing until `go` is set: its first write waits for it."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()

    def write(self, text: str) -> int:
        self.go.wait(10)
        return super().write(text)


def test_an_outlet_drops_past_its_limit_and_says_how_much(caplog: pytest.LogCaptureFixture) -> None:
    """An outlet never waits for its reader; past its limit it drops lines, then says how many."""
    # Past the limit, lines are dropped and counted, and once the reader reads again a warning says
    # how many; what was queued is all written.
    petstore = logging.getLogger("petstore")  # another test's configuration may not propagate
    petstore.addHandler(caplog.handler)
    stream = _StalledReader()
    outlet = Outlet(stream, "a test stream")
    outlet.limit = 100
    outlet.write("first\n")  # taken by the thread, which waits in the stream's write
    wait_until(lambda: outlet._writing, "the thread writing")
    for number in range(30):  # 8 characters each: 12 queued, 18 dropped
        outlet.write(f"line {number:02}\n")
    stream.go.set()
    assert outlet.wait(10)
    assert stream.getvalue() == "first\n" + "".join(f"line {n:02}\n" for n in range(12))
    try:
        wait_until(lambda: "dropped" in caplog.text, "the warning")
    finally:
        petstore.removeHandler(caplog.handler)
    assert "a test stream: 18 lines dropped while it was not read" in caplog.text


def test_once_the_exit_began_a_write_returns_when_its_text_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the exit has begun (wait_for_outlets), a write waits for its text to be written."""
    # uvicorn logs its last lines, then raises the SIGTERM again, which ends the process at once:
    # queued for the outlet's thread, they were lost (the JSON log stopped at "Shutting down").
    stream = _StalledReader()
    outlet = Outlet(stream, "a test stream")
    monkeypatch.setattr(logs, "_exit_wait_ends", time.monotonic() + 10)  # the exit's budget
    threading.Timer(0.2, stream.go.set).start()  # a reader that reads a while later
    outlet.write("Finished server process\n")
    assert stream.getvalue() == "Finished server process\n"


def test_once_the_exit_began_the_outlet_s_own_thread_never_waits_for_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A line the outlet's thread writes while writing (its warning of dropped lines goes to
    the log it writes) does not wait for that thread: it would wait for itself."""
    # It did, the exit's whole budget, and the lines after it (uvicorn's last) were lost.
    budget_ends = time.monotonic() + 10
    own_write_ended: list[float] = []

    class Logging(io.StringIO):  # as the thread's warning reaches the outlet it writes
        def write(self, text: str) -> int:
            if text == "first\n":
                outlet.write("the thread's own line\n")
                own_write_ended.append(time.monotonic())
            return super().write(text)

    stream = Logging()
    outlet = Outlet(stream, "a test stream")
    monkeypatch.setattr(logs, "_exit_wait_ends", budget_ends)  # the exit's
    outlet.write("first\n")
    assert own_write_ended[0] < budget_ends  # it did not wait the budget out
    assert stream.getvalue() == "first\nthe thread's own line\n"


@pytest.mark.anyio
async def test_a_drain_cut_off_by_the_shutdown_loses_no_line() -> None:
    """An access-log drain cut off by the shutdown loses no line: all are written, in order."""
    # The lifespan's end cancels the task that drains the access log, which may be between two
    # chunks: the lines it had formatted, and the entries it had not, were lost (a request cut off
    # by Ctrl-C twice had no line, now and then).
    stream = io.StringIO()

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    log = AccessLog(answer, stream)
    transport = httpx.ASGITransport(app=log)
    async with httpx.AsyncClient(transport=transport, base_url="http://petstore") as client:
        for number in range(300):  # more than a chunk
            await client.get(f"/p/{number}")
    drain = asyncio.create_task(log.drain())
    await asyncio.sleep(0)  # it formats its first chunk, and lets the loop run
    drain.cancel()
    await asyncio.gather(drain, return_exceptions=True)
    log.flush()
    paths = re.findall(r'"GET (/p/\d+)"', stream.getvalue())
    assert paths == [f"/p/{number}" for number in range(300)]
