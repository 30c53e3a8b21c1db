"""uvicorn's cycle of one request (QuickHead), its transport (OneWrite), lingering closes."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent, HTTPRequestEvent
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    RequestResponseCycle,
)

from routing import REQUEST_ID_HEADER, error_response
from schemas import ErrorCode

# The header lines QuickHead checked and made, by their (name, value): kept for the pairs that
# come back (Content-Type, a path's deprecation headers, the date of this second, a body's
# length), emptied when full. Never the request id or a created pet's Location, new each time.
_lines: dict[tuple[bytes, bytes], bytes] = {}
_LINES_AT_MOST: Final = 1024
_NOT_KEPT: Final = frozenset({b"x-request-id", b"location"})
# Headers uvicorn acts on (keep-alive, chunked): their responses go through its own `send`.
_ACTED_ON: Final = frozenset({b"connection", b"transfer-encoding"})


def _line(header: tuple[bytes, bytes]) -> bytes | None:
    """The header's line as uvicorn would write it, None if uvicorn must see it (a name it
    would lower-case or act on, a character its patterns refuse)."""
    name, value = header
    if (
        HEADER_RE.search(name)
        or HEADER_VALUE_RE.search(value)
        or name != name.lower()
        or name in _ACTED_ON
    ):
        return None
    line = b"%s: %s\r\n" % header
    if name not in _NOT_KEPT:
        if len(_lines) >= _LINES_AT_MOST:
            _lines.clear()
        _lines[header] = line
    return line


def _head(
    status: int,
    default_headers: list[tuple[bytes, bytes]],
    headers: Any,
    request_id: Any,  # the scope's (name, value), which AccessLog checked or made
) -> tuple[list[bytes], bytes | None] | None:
    """The status line and header lines of a response head, and its Content-Length; None
    when uvicorn must make it: a header `_line` refuses, or headers that are not a list or
    tuple of (bytes, bytes) pairs (an iterator would be spent before uvicorn saw it)."""
    if not isinstance(headers, list | tuple):
        return None
    content, length = [STATUS_LINE[status]], None
    try:
        for header in (*default_headers, *headers):
            # The request id is never among the lines kept: looked for only where they miss
            # (a look at every header cost the head of a getPet 650 instructions more).
            if (line := _lines.get(header)) is None:
                if header is request_id:  # AccessLog's: visible ASCII only
                    line = b"x-request-id: %s\r\n" % header[1]
                elif (line := _line(header)) is None:
                    return None
            if length is None and header[0] == b"content-length":
                length = header[1]
            content.append(line)
    except (TypeError, ValueError):  # a list for a pair (unhashable), three items, a str
        return None
    return content, length


class QuickHead(RequestResponseCycle):
    """uvicorn's cycle of one request, but for the head of its response (and `receive`, for a
    client gone): each header line is checked and made once and then reused while the same
    (name, value) comes back. uvicorn checks every header of every response with two regular
    expressions and makes its line in Python, about 4.5k instructions a header: 30k of a
    getPet's 200k, for seven headers of which five are the same every time. The request id,
    which AccessLog checked or made, is not checked again.

    The bytes and the checks are uvicorn's own. Anything else goes through uvicorn's `send`: a
    body; a head with a header `_line` refuses, or without Content-Length where uvicorn would
    go chunked, or with an unknown status; a connection not kept alive, or not to be, the
    request's body not yet asked for (`Expect: 100-continue`); write flow paused; uvicorn's
    access log on. uvicorn makes every cycle one of these: protocol.py points the
    name it builds them by at this class (assigning `__class__` to each cycle instead cost
    7.4k instructions a request more: the interpreter's attribute caches missed)."""

    async def send(self, message: ASGISendEvent) -> None:
        if (
            message["type"] != "http.response.start"
            or self.response_started
            or self.disconnected
            or self.flow.write_paused
            or self.access_log
            or not self.keep_alive
            or self.waiting_for_100_continue
            or (status := message["status"]) not in STATUS_LINE
        ):
            if self.waiting_for_100_continue:  # true only until the response starts
                # Answered before its body was asked for: its client may never send it, and
                # the next request on the connection would be read as that body. Closed
                # instead, as after a 413 (RFC 9110 10.1.1 asks to say which).
                self.keep_alive = False
            await super().send(message)
            return
        headers = message.get("headers", ())
        made = _head(status, self.default_headers, headers, self.scope.get(REQUEST_ID_HEADER))
        if made is None:
            await super().send(message)
            return
        content, length = made
        if length is None and self.scope["method"] != "HEAD" and status not in (204, 304):
            await super().send(message)  # chunked
            return
        self.response_started = True
        if length is not None:
            self.expected_content_length = int(length.decode())
            self.chunked_encoding = False
        content.append(b"\r\n")
        self.transport.write(b"".join(content))

    async def receive(self) -> ASGIReceiveEvent:
        """uvicorn's, written out (a call less a read), but for a client gone: the body bytes
        that arrived before it left are still handed over, then the disconnect. uvicorn drops
        them, so a create whose client left while an injected delay held it was never stored,
        where one read at once is: the plane could not play a server slower than its client's
        timeout, which a retry with an Idempotency-Key is for."""
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            self.flow.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        if self.response_complete or (self.disconnected and not self.body):
            return {"type": "http.disconnect"}
        message: HTTPRequestEvent = {
            "type": "http.request",
            "body": bytes(self.body),
            "more_body": self.more_body,
        }
        self.body = bytearray()
        return message

    async def send_500_response(self) -> None:
        """uvicorn's answer to a request the app left unanswered (cancelled by a shutdown past
        its grace period; a bug), as every answer of ours: an Error body, with the request's
        id. uvicorn's own is plain text; it has logged why."""
        response = error_response(
            500,
            ErrorCode.INTERNAL_ERROR,
            "Internal error: the request was left unanswered; the log has details",
            {"Connection": "close"},
        )
        # uvicorn's ASGI types and Starlette's describe the same dicts apart.
        await response(self.scope, self.receive, self.send)  # type: ignore[arg-type]


# A body up to this size goes out joined to its head (one copy, one write); larger ones in a
# writev of the two (writelines).
_JOINED_AT_MOST: Final = 64 * 1024
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


class OneWrite:
    """The transport as one request's cycle (uvicorn's RequestResponseCycle) sees it: the
    response's head is held back and goes out with the first piece of its body, in one write
    (one writev for a large body). uvicorn writes the two apart, two system calls a response;
    one is 8-17 % more requests per CPU-second (README, Performance). A 100 Continue, and
    the head of a HEAD response (which has no body), go out at once; closing sends what is
    held first, and lingers when the request's body was not read whole (close_lingering).

    It holds no reference to the cycle, which holds it: a cycle of references would leave
    every request's objects to the garbage collector (7 of them a request, 6 % of the CPU)."""

    __slots__ = ("held", "transport", "waiting")

    def __init__(self, transport: asyncio.Transport, method: str) -> None:
        self.transport = transport
        self.held: bytes | None = None
        self.waiting = method != "HEAD"  # for the response's head, which is held

    def write(self, data: bytes) -> None:
        held = self.held
        try:
            if held is not None:
                self.held = None
                if len(data) <= _JOINED_AT_MOST:  # joined: uvloop writes it at once, no request
                    self.transport.write(held + data)
                else:  # a large body not copied; libuv's queued writev costs more
                    self.transport.writelines((held, data))
            elif self.waiting and data != _CONTINUE:  # uvicorn's, before the response starts
                self.waiting = False
                self.held = data
            else:
                self.transport.write(data)
        except RuntimeError:  # uvloop's, to a closed transport; asyncio's drops it in silence
            if not self.transport.is_closing():  # the answer of a pipelined request, its
                raise  # client gone (uvicorn marks only the request being answered)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        if self.held is not None:  # a response the app left unfinished
            self.transport.write(self.held)
            self.held = None
        cycle = getattr(self.transport.get_protocol(), "cycle", None)
        if cycle is not None and cycle.more_body:  # its request's body not read whole: a 413
            close_lingering(self.transport)
        else:
            self.transport.close()


# How long a closing connection whose client still sends is read (what comes, dropped) before
# it is closed all the same.
LINGER_SECONDS: Final = 2.0


def close_lingering(transport: asyncio.Transport, *, lost_now: bool = False) -> None:
    """Close the connection once its client has stopped sending: what is written goes out,
    then the end of our side (a half-close); what the client still sends is read and dropped
    until it closes its side, LINGER_SECONDS at most. Closed with bytes unread, the kernel
    answers them with a reset, which can reach the client before the answer does: a client
    that sends a whole body before reading, as Python's http.client does, saw
    ConnectionResetError instead of the 413 for a body over the limit, or the 400 for bytes
    that are no request. (nginx's lingering close.) `lost_now`: the protocol is told the
    connection is lost at once (the request ends now: a drop is journaled before its client
    sees the end), not once it closes."""
    if transport.is_closing() or not transport.can_write_eof():  # TLS can't half-close
        transport.close()
        return
    protocol = transport.get_protocol()
    transport.write_eof()  # after what is written
    transport.set_protocol(_Dropping(None if lost_now else protocol, transport))
    transport.resume_reading()  # uvicorn pauses it when a body it holds passes 64 KiB
    if lost_now:
        protocol.connection_lost(None)


class _Dropping(asyncio.Protocol):
    """A lingering connection's protocol: drops what comes, closes at the client's end or
    after LINGER_SECONDS, then hands the loss to the protocol it replaced (uvicorn counts its
    connections, and a shutdown waits for them), unless that was told already (None)."""

    def __init__(self, protocol: asyncio.BaseProtocol | None, transport: asyncio.Transport) -> None:
        self.protocol = protocol
        self.timer = asyncio.get_running_loop().call_later(LINGER_SECONDS, transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # dropped: the answer is sent, the connection closing

    def eof_received(self) -> None:
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self.timer.cancel()
        if self.protocol is not None:
            self.protocol.connection_lost(exc)
