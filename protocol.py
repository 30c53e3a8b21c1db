"""The connection: uvicorn's httptools protocol with client timeouts, Error 400s and `drop`."""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Final

# The one use of uvicorn's internals (uvicorn is pinned to the minor version tested with it):
# only the connection can time a client out, answer bytes that are no request, or drop one.
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from schemas import ErrorCode, error_response

# The scope extension that closes a request's connection without an answer: each request's
# scope["extensions"][DROP] is {"close": fn}.
DROP: Final = "petstore.drop"

# What of uvicorn's HttpToolsProtocol this class overrides or relies on; a test checks that the
# installed uvicorn still has every name (the timeout and drop tests use what it reads of a cycle).
REQUIRED: Final = [
    "connection_made",
    "connection_lost",
    "send_400_response",
    "on_headers_complete",
    "on_body",
    "on_response_complete",
    "loop",
    "transport",
    "flow",
    "scope",
    "cycle",
    "server_state",
]


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol, but a client gets `client_timeout` seconds to send a whole
    request head, and its body may not stall that long: uvicorn alone waits for ever."""

    client_timeout: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # When the client last sent what it owes, or began to owe it (a head, a body's bytes).
        self._progress = self.loop.time()
        self._held = False  # whether the last check found the client unable to send
        self._timer = self.loop.call_at(self._progress + self.client_timeout, self._check)
        self.extensions: dict[str, dict[object, object]] = {DROP: {"close": self._drop}}

    def connection_lost(self, exc: Exception | None) -> None:
        self._timer.cancel()
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._progress = self.loop.time()  # the head is whole: the body's clock starts
        self.scope["extensions"] = self.extensions  # the connection's, made once

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._progress = self.loop.time()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._progress = self.loop.time()  # the next request's head is owed from now

    def _check(self) -> None:
        """Close the connection when its client has owed a request head, or its body's next
        bytes, for `client_timeout`. While it can't send (uvicorn paused reading, a 100 Continue
        not sent yet) it owes nothing, and its clock starts again at the first check after."""
        if self.transport.is_closing():
            return
        now, cycle = self.loop.time(), self.cycle
        idle = cycle is None or cycle.response_complete  # a head is owed
        held = not idle and (self.flow.read_paused or cycle.waiting_for_100_continue)
        owes = idle or (cycle.more_body and not held)
        if not owes or self._held:  # nothing owed now, or it could not send at the last check
            self._progress = now
        self._held = held
        if now >= self._progress + self.client_timeout:
            self.transport.close()
        else:
            self._timer = self.loop.call_at(self._progress + self.client_timeout, self._check)

    def _drop(self) -> None:
        """End the connection at once, unanswered: our side ends now, and it closes when the
        client's does (or `client_timeout` later). Closed with the client's bytes unread, the
        kernel would answer them with a reset, which can overtake the end."""
        self.cycle.disconnected = True  # uvicorn then sends nothing for it, not even its 500
        self.transport.write_eof()
        self._timer.cancel()
        self._timer = self.loop.call_later(self.client_timeout, self.transport.close)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser refuses, as an Error body with a request id; a
        Content-Length past 64 bits is over any body limit, so a 413."""
        reason = str(sys.exception() or "")  # uvicorn calls this handling the parser's error
        status, code = 400, ErrorCode.VALIDATION_ERROR
        if reason == "Content-Length overflow":
            status, code = 413, ErrorCode.PAYLOAD_TOO_LARGE
        message = f"{msg.removesuffix('.')}: {reason}" if reason else msg
        headers = {"Connection": "close", "X-Request-Id": uuid.uuid4().hex}
        response = error_response(status, code, message, headers)
        lines = [*self.server_state.default_headers, *response.raw_headers]
        head = STATUS_LINE[status] + b"".join(b"%s: %s\r\n" % line for line in lines)
        self.transport.write(head + b"\r\n" + response.body)
        self.transport.close()
