"""head.QuickHead: a response's head, made from lines kept for the headers that come back,
is byte for byte what uvicorn's own cycle writes, with the same state after, or the same error."""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import Any

import pytest
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.flow_control import FlowControl

from head import QuickHead
from routing import REQUEST_ID_HEADER

UVICORNS: Any = QuickHead.__bases__[0]  # uvicorn's RequestResponseCycle
DATE = (b"date", b"Tue, 24 Nov 2026 14:00:00 GMT")
REQUEST_ID = (b"x-request-id", b"0a1b2c3d-1f2e")  # as AccessLog puts it in the scope
JSON = [(b"content-length", b"2"), (b"content-type", b"application/json")]
DEPRECATION = [
    (b"deprecation", b"@1767225600"),
    (b"link", b'</v1/pets/{petId}>; rel="successor-version"'),
]

# (method, keep-alive, status, headers): the service's own heads, and every way out to uvicorn.
CASES: dict[str, tuple[str, bool, int, list[tuple[bytes, bytes]]]] = {
    "json": ("GET", True, 200, [*JSON, REQUEST_ID]),
    "deprecated": ("GET", True, 200, [*JSON, REQUEST_ID, *DEPRECATION]),
    "created": ("POST", True, 201, [*JSON, (b"location", b"/v1/pets/7"), REQUEST_ID]),
    "a client's id": ("GET", True, 200, [*JSON, (b"x-request-id", b"from-the-client")]),
    "no content": ("POST", True, 204, [REQUEST_ID]),
    "head": ("HEAD", True, 200, [(b"content-type", b"application/json")]),
    "chunked": ("GET", True, 200, [(b"content-type", b"text/plain")]),
    "upper case": ("GET", True, 200, [(b"Content-Type", b"text/plain"), JSON[0]]),
    "connection close": ("GET", True, 200, [*JSON, (b"connection", b"close")]),
    "transfer-encoding": ("GET", True, 200, [(b"transfer-encoding", b"chunked")]),
    "not kept alive": ("GET", False, 200, JSON),
    "two lengths": ("GET", True, 200, [(b"content-length", b"5"), (b"content-length", b"7")]),
    "two cookies": ("GET", True, 200, [*JSON, (b"set-cookie", b"a=1"), (b"set-cookie", b"b=2")]),
    "bad value": ("GET", True, 200, [*JSON, (b"x-note", b"a\nb")]),
    "bad name": ("GET", True, 200, [*JSON, (b"x note", b"a")]),
    "bad length": ("GET", True, 200, [(b"content-length", b"two")]),
    "unknown status": ("GET", True, 999, JSON),
    "pairs as lists": ("GET", True, 200, [[b"content-length", b"2"], [b"x-a", b"b"]]),  # type: ignore[list-item]
    "a str": ("GET", True, 200, [*JSON, (b"x-a", "b")]),  # type: ignore[list-item]
}


class Transport:
    """What a cycle writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False


def send_head(cycle_class: type[Any], case: str) -> tuple[object, ...]:
    """What a cycle of this class writes for the case's response head, its state after, and
    the error it raised."""
    method, keep_alive, status, headers = CASES[case]
    transport = Transport()
    logger = logging.getLogger("tests.head")
    cycle = cycle_class(
        scope={"type": "http", "method": method, REQUEST_ID_HEADER: REQUEST_ID},
        transport=transport,
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logger,
        access_logger=logger,
        access_log=False,
        default_headers=[DATE],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )
    message = {"type": "http.response.start", "status": status, "headers": list(headers)}
    error = None
    try:
        asyncio.run(cycle.send(message))
    except Exception as raised:  # the same error is what is compared
        error = repr(raised)
    state = (cycle.response_started, cycle.chunked_encoding, cycle.expected_content_length)
    return b"".join(transport.written), state, cycle.keep_alive, error


@pytest.mark.parametrize("case", CASES)
def test_quick_head_writes_what_uvicorn_writes(case: str) -> None:
    """QuickHead writes a response's head byte for byte as uvicorn does, from kept lines too."""
    expected = send_head(UVICORNS, case)
    assert send_head(QuickHead, case) == expected
    assert send_head(QuickHead, case) == expected  # again, from the lines kept


def test_the_service_heads_go_the_quick_way() -> None:
    """The service's own heads are made by QuickHead, not handed to uvicorn's `send`."""
    # A head it can't make is handed to `send`: the check that the count can fail.
    calls = []

    class Counting(QuickHead):
        async def send(self, message: Any) -> None:
            original = UVICORNS.send

            async def counted(cycle: Any, sent: Any) -> None:
                calls.append(sent["type"])
                await original(cycle, sent)

            UVICORNS.send = counted
            try:
                await super().send(message)
            finally:
                UVICORNS.send = original

    for case in ("json", "deprecated", "created", "a client's id", "no content", "head"):
        assert send_head(Counting, case)[3] is None, case
    assert calls == []
    send_head(Counting, "chunked")
    assert calls == ["http.response.start"]


def test_uvicorn_builds_its_cycles_as_quick_heads() -> None:
    """uvicorn's httptools protocol builds each request's cycle as a QuickHead."""
    # Importing server points that name at QuickHead: if a uvicorn upgrade renames it, this fails.
    importlib.import_module("server")
    assert httptools_impl.RequestResponseCycle is QuickHead
    source = httptools_impl.HttpToolsProtocol.on_headers_complete.__code__.co_names
    assert "RequestResponseCycle" in source
