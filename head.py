"""uvicorn's cycle of one request, QuickHead: a response's head from lines made once."""

from __future__ import annotations

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
            if header is request_id:  # AccessLog's: visible ASCII only
                line = b"x-request-id: %s\r\n" % header[1]
            elif (found := _lines.get(header) or _line(header)) is not None:
                line = found
            else:
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
    go chunked, or with an unknown status; a connection not kept alive; write flow paused;
    uvicorn's access log on. uvicorn makes every cycle one of these: server.py points the
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
            or (status := message["status"]) not in STATUS_LINE
        ):
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
        self.waiting_for_100_continue = False
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
