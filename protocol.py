"""StallGuard, the HTTP protocol: uvicorn's, with client deadlines, limits and our own 400s.

uvicorn's httptools protocol, with the slow-client guard (a stall, the body's rate), the
head's and the trailers' limits, one write a response and the server's own 400s."""

from __future__ import annotations

import asyncio
import functools
import secrets
from collections.abc import Callable
from typing import Any, Final

import httptools
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from accesslog import client_request_id
from faults import CLOSE_EXTENSION
from head import OneWrite, QuickHead, close_lingering
from routing import SENT_REQUEST_ID, note_request_header
from schemas import Error, ErrorCode, encoder
from settings import Settings

# A request head (its line and headers) still unfinished this many bytes past the read it
# began in is refused: httptools sets no limit, and would hold whatever a client sends.
HEAD_LIMIT: Final = 64 * 1024
# Bytes read since a request's head or its body's last piece that are none of its body: a
# chunked body's trailers (headers httptools keeps whatever their size: 300 MB of them grew
# the process by 300 MB), its framing, pipelined requests' heads. Past this, the
# server's own 400; a read is 256 KiB at most.
UNBODIED_LIMIT: Final = HEAD_LIMIT + 1024 * 1024
# A body slower than this on average, while the client may send it, is cut off once the
# client timeout has passed (Apache's mod_reqtimeout, MinRate=500): its timeout is extended a
# second for every 500 bytes. Only stalls were cut off, and a byte every 5 s held a connection
# for as long as the client liked.
MIN_BODY_RATE: Final = 500
# The longest request target httptools parses (its offsets are 16 bits).
_TARGET_MAX: Final = 65535
# The request headers StallGuard.on_header acts on as they are parsed.
_READ_AS_PARSED: Final = frozenset((b"expect", b"prefer", b"x-request-id"))


# uvicorn's httptools protocol builds each request's cycle by this name: ours, QuickHead.
# (mypy refuses assigning to a class's name: that is the hook.)
httptools_impl.RequestResponseCycle = QuickHead  # type: ignore[misc]


class StallGuard(HttpToolsProtocol):
    """uvicorn's HTTP protocol, plus a deadline: a client gets `client_timeout` seconds to send
    a whole request head, and its body may not stall longer than that. uvicorn alone waits
    forever, which lets a slowloris client hold connections open. A head may not grow past
    HEAD_LIMIT. Each response goes out in one write (OneWrite), and bytes that are no request
    get an Error body, not uvicorn's text.

    It costs a request one stamp of the clock: a single timer a connection wakes up every
    `client_timeout` seconds and reads what the client still owes from uvicorn's own state.
    """

    client_timeout: float = 10.0
    offers_close = False  # the test-control plane's `drop`: scope["extensions"][CLOSE_EXTENSION]

    @staticmethod
    def note_refusal(
        client: tuple[str, int] | None, request_id: bytes | None, elapsed_ns: int, status: int
    ) -> bytes:
        """Note a 400 (a 413) this protocol answers itself; the id it carries (the client's, or a
        made one). http_protocol() hands in AccessLog.note_refusal, which writes its line,
        counts it and makes one of the process's ids; this one serves `--http
        protocol:StallGuard`."""
        return request_id or secrets.token_hex(8).encode()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._began = 0.0  # when the connection opened or the current request began
        self._progress = 0.0  # when the current request last sent something
        self._timer: asyncio.TimerHandle | None = None
        self._refusal: bytes | None = None  # the 400 for bytes that are no request, if held
        # The bytes of a request's head read since the read it began in; -1: no head begun
        # and unfinished.
        self._head_size = -1
        self._unbodied = 0  # bytes read since the head or the body's last piece (UNBODIED_LIMIT)
        self._body_bytes = 0  # of the current request's body, since its body's clock began
        self._body_began = 0.0  # that clock (MIN_BODY_RATE), held while the client can't send
        self._held = False  # the client could not send at the last check

    # uvicorn annotates it asyncio.Transport, asyncio.Protocol a BaseTransport: mypy's override.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Made once a connection; each request's scope shares it. A drop closes lingering: a
        # body the client still sends would be answered by a reset, which reached it before
        # the end of our side, now and then (one of three drops of a create). The
        # request ends at once (journaled before its client sees the end).
        drop = functools.partial(close_lingering, transport, lost_now=True)
        self._extensions: dict[str, dict[object, object]] = {CLOSE_EXTENSION: {"close": drop}}
        self._began = self._progress = self.loop.time()
        self._timer = self.loop.call_at(self._began + self.client_timeout, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def send_400_response(self, msg: str, status: int = 400) -> None:
        """uvicorn's answer to bytes it can't parse as a request (it has logged a warning), as
        every answer of ours: an Error body, validation_error, with an X-Request-Id (the
        client's when its header came before the fault, else a made one); then it closes, as
        uvicorn does, but lingering (head.close_lingering). uvicorn's own is plain text with no
        id, and goes out at once, so that the answers of requests read whole before the fault
        (pipelined, or a body longer than its Content-Length: a 201 among them) were lost; this
        one waits for them."""
        if self._refusal is not None:  # more bytes after the fault: refused already
            return
        # The request read last's first X-Request-Id, as on_header noted it.
        scope: Scope | None = self.scope  # type: ignore[assignment] # uvicorn's TypedDict
        sent = scope.get(SENT_REQUEST_ID) if scope is not None else None
        request_id = None if sent is None else client_request_id(sent)
        elapsed_ns = int((self.loop.time() - self._began) * 1e9)
        message = f"{msg.removesuffix('.')}; the connection is closed"
        code = ErrorCode.PAYLOAD_TOO_LARGE if status == 413 else ErrorCode.VALIDATION_ERROR
        body = encoder.encode(Error(code=code, message=message, status=status))
        head = [
            STATUS_LINE[status],
            *(b"%s: %s\r\n" % header for header in self.server_state.default_headers),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"x-request-id: %s\r\n"
            % self.note_refusal(self.client, request_id, elapsed_ns, status),
            b"connection: close\r\n\r\n",
        ]
        self._refusal = b"".join(head) + body
        cycle = self.cycle  # the last request read: the answers go out in order
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            self.flow.pause_reading()
            # Its callback, not an override of on_response_complete, which every request
            # would pay for.
            cycle.on_response = self._refuse_after_the_last_answer
            return
        # A fault in the last request's body (that request is the bad one, and its app's answer
        # is not sent), or in a request begun after the last one's answer.
        if cycle is not None:
            cycle.disconnected = True  # uvicorn's send drops what its app still writes
            cycle.message_event.set()
        if self.pipeline and self.pipeline[0][0] is cycle:  # queued behind requests still to
            # be answered: in its turn, the refusal instead of its app (uvicorn's ASGI types
            # and Starlette's describe the same dicts apart)
            self.pipeline[0] = (cycle, self._refuse_in_turn)  # type: ignore[assignment]
            return
        self.transport.write(self._refusal)
        self._linger()

    async def _refuse_in_turn(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A pipelined request's app, once the answers before it went out: the refusal."""
        if self._refusal is not None and not self.transport.is_closing():
            self.transport.write(self._refusal)
            self._linger()

    def data_received(self, data: bytes) -> None:
        """uvicorn's, and the head's limit. Written out rather than calling uvicorn's through
        super(), which cost several times what the limit does (README: Performance)."""
        if self._head_size >= 0:  # a head begun in an earlier read is not yet whole: rare
            room = HEAD_LIMIT - self._head_size  # how far into this read it may end
            self._head_size += len(data)
            if self._head_size > HEAD_LIMIT and not _may_end_a_head(data, room):
                if self._refusal is None:
                    message = f"Request head larger than {HEAD_LIMIT} bytes"
                    self.logger.warning("%s.", message)
                    self.send_400_response(message)
                return  # not parsed: httptools would keep it all
        else:
            self._unbodied += len(data)
            if self._unbodied > UNBODIED_LIMIT:  # trailers without end
                if self._refusal is None:
                    message = f"Request trailers larger than {UNBODIED_LIMIT} bytes"
                    self.logger.warning("%s.", message)
                    self.send_400_response(message)
                return
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._refuse_unparsed(error)
        except httptools.HttpParserUpgrade as upgrade:
            self._upgrade_asked(data[upgrade.args[0] :])

    def _refuse_unparsed(self, error: httptools.HttpParserError) -> None:
        """The 400 to bytes httptools refused (its text says what: llhttp's reason)."""
        reason = str(error) or "unknown reason"
        if isinstance(error.__context__, httptools.HttpParserInvalidURLError):
            # Raised in uvicorn's callback, as "User callback error": a target httptools
            # can't parse (CONNECT's host:port; one past its lengths' 16 bits).
            reason = "invalid request target"
            if len(self.url) > _TARGET_MAX:
                reason = f"request target longer than {_TARGET_MAX} bytes"
        self.logger.warning("Invalid HTTP request received: %s.", reason)
        overflow = reason == "Content-Length overflow"  # 2**64 or more: over any limit
        self.send_400_response(
            "The body is over the limit: its Content-Length overflows 64 bits"
            if overflow
            else f"Invalid HTTP request received: {reason[:1].lower()}{reason[1:]}",
            413 if overflow else 400,
        )

    def _upgrade_asked(self, rest: bytes) -> None:
        """A request asked to upgrade; `rest`: the read's bytes after its head."""
        while True:
            if self._should_upgrade():  # never, with ws="none": kept for other settings
                self.handle_websocket_upgrade()
                return
            self._unsupported_upgrade_warning()
            rest = self._as_plain_http(rest)
            try:
                self.parser.feed_data(rest)
            except httptools.HttpParserError as error:
                self._refuse_unparsed(error)
            except httptools.HttpParserUpgrade as upgrade:  # another, pipelined behind it
                rest = rest[upgrade.args[0] :]
                continue
            return

    def _as_plain_http(self, rest: bytes) -> bytes:
        """A request that asked to upgrade, served as plain HTTP (RFC 9110 7.8 lets a server
        ignore Upgrade) with its body: httptools ends such a request at its head, its body
        unread (the app saw none), and parses what follows, the body included, as requests
        (a body written as a request was served: one a proxy in front never saw). A parser of
        its own reads the body into the request's cycle, told its framing by a head made of
        the request's (AfterUpgrade drops that head's callbacks), and goes on with the
        connection's next requests. Returns what is left of the read to parse."""
        framing = b"".join(
            b"%s: %s\r\n" % header
            for header in self.headers
            if header[0] in (b"content-length", b"transfer-encoding")
        )
        cycle = self.cycle
        if not framing or cycle is None:  # no body: the request ended with its head
            return rest
        cycle.more_body = True  # httptools ended it: uvicorn's on_message_complete ran
        cycle.message_event.clear()
        self.parser = httptools.HttpRequestParser(AfterUpgrade(self))
        return b"POST / HTTP/1.1\r\n" + framing + b"\r\n" + rest

    def _refuse_after_the_last_answer(self) -> None:
        self.on_response_complete()
        if self._refusal is not None and not self.transport.is_closing():
            self.transport.write(self._refusal)
            self._linger()

    def _linger(self) -> None:
        """Close lingering, the stall deadline no longer watched: the client was answered."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        close_lingering(self.transport)

    def _unsupported_upgrade_warning(self) -> None:
        # uvicorn's two warnings would tell an operator to install a WebSocket library: the
        # service runs without one on purpose (serve: ws="none") and answers the request as HTTP.
        self.logger.debug("Upgrade ignored: the service speaks HTTP/1.1 only")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[SENT_REQUEST_ID] = None  # type: ignore[typeddict-unknown-key] # on_header's
        self._began = self._progress = self._body_began = self.loop.time()
        self._head_size = self._unbodied = self._body_bytes = 0
        self._held = False
        if self.offers_close:
            self.scope["extensions"] = self._extensions

    def on_header(self, name: bytes, value: bytes) -> None:
        """uvicorn's, written out (through super(), a call more a header), noting the first
        X-Request-Id and every Prefer as they come: a look in a set a header, 200 instructions
        more than uvicorn's compare, where AccessLog's look afterwards cost 350."""
        name = name.lower()
        if name in _READ_AS_PARSED:
            if name != b"expect":
                note_request_header(self.scope, name, value)  # type: ignore[arg-type]
            elif value.lower() == b"100-continue":
                self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._head_size = -1
        cycle = self.cycle
        # A cycle made just now (its task runs from the loop's next turn); not one kept from
        # the request before, as when uvicorn returned early (an upgrade).
        # OneWrite is the transport as the cycle uses it (write, close, is_closing), no subclass.
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = OneWrite(self.transport, self.scope["method"])  # type: ignore[assignment]
            if self.expect_100_continue and not _may_wait_for_100_continue(
                self.scope["http_version"], self.headers
            ):
                cycle.waiting_for_100_continue = False  # no 100, no close for want of a body

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._progress = self.loop.time()
        self._unbodied = 0
        self._body_bytes += len(body)

    def _check(self) -> None:
        """Close the connection if its client owes us bytes for too long: the head, whole
        within the client timeout; the body, never stalled that long, and coming at
        MIN_BODY_RATE on average, past the client timeout. While the client can't send (the
        app has not read what it sent, or not yet asked for it after `Expect: 100-continue`:
        a fault's delay holds a create) it owes nothing, and the body's clocks start again at
        the first check that finds it can: when, between two checks, is not known, and a clock
        started at the last check of the hold gave it as little as nothing (a create's body
        sent on its 100 Continue was cut off as a stall, now and then)."""
        self._timer = None
        if self.transport.is_closing() or self.transport.get_protocol() is not self:  # lingering
            return
        now, cycle = self.loop.time(), self.cycle
        stalled = by_rate = now + self.client_timeout  # the client owes nothing
        if cycle is None or cycle.scope is not self.scope:  # the head: no cycle for it yet
            stalled = by_rate = self._began + self.client_timeout
        elif cycle.response_complete and self.timeout_keep_alive_task is None:
            # Answered, no request begun since, and yet uvicorn's keep-alive timer is off: bytes
            # came that begin none (line breaks, which llhttp skips between requests), and
            # stopped it. Idle, as that timer would have found it when it ran out.
            self.logger.info("closing a connection that sent only line breaks since its answer")
            self.transport.close()
            return
        elif self.flow.read_paused or cycle.waiting_for_100_continue:
            self._held = True
        elif self._held:  # it can send again, since the last check: its clocks start now
            self._held = False
            self._progress, self._body_began, self._body_bytes = now, now, 0
        elif cycle.more_body:
            stalled = self._progress + self.client_timeout
            by_rate = self._body_began + self.client_timeout + self._body_bytes / MIN_BODY_RATE
        if now >= stalled:
            self.logger.info("closing a connection that stalled for %.1fs", self.client_timeout)
        elif now >= by_rate:
            self.logger.info(
                "closing a connection whose body came slower than %d B/s", MIN_BODY_RATE
            )
        else:
            self._timer = self.loop.call_at(min(stalled, by_rate), self._check)
            return
        self.transport.close()


class AfterUpgrade:
    """The callbacks of the parser a request that asked to upgrade leaves its connection with
    (StallGuard._as_plain_http): those of the head it is fed first, made up to tell it the
    body's framing, are dropped; all others go to the protocol. A callback more a call, on
    that connection only."""

    def __init__(self, protocol: StallGuard) -> None:
        self.protocol = protocol
        self.made_up = True  # the head being parsed is the made-up one

    def on_message_begin(self) -> None:
        if not self.made_up:
            self.protocol.on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self.made_up:
            self.protocol.on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.made_up:
            self.protocol.on_header(name, value)

    def on_headers_complete(self) -> None:
        if self.made_up:
            self.made_up = False
        else:
            self.protocol.on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self.protocol.on_body(body)

    def on_message_complete(self) -> None:
        self.protocol.on_message_complete()


def _may_wait_for_100_continue(http_version: str, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request that sent `Expect: 100-continue` may be waiting for a 100 before its
    body: it has one, and is HTTP/1.1 (RFC 9110 10.1.1: an HTTP/1.0 request's expectation is
    ignored; its client may take a 100 for the answer). One without a body was answered with
    its connection closed, as one whose body was never asked for, and one pipelined behind it
    went unanswered."""
    if http_version == "1.0":
        return False
    for name, value in headers:
        if name == b"transfer-encoding" or (
            name == b"content-length" and value.strip(b" \t") != b"0"
        ):
            return True
    return False


def _may_end_a_head(data: bytes, within: int) -> bool:
    """Whether a head begun in an earlier read may end in this one, `within` bytes in (then
    the parser is the judge: pipelined requests may follow it, a read past the limit)."""
    return data.startswith((b"\n", b"\r\n")) or b"\n\r\n" in data[: max(within, 0) + 3]


# What notes a 400 the server answers itself: client, the client's usable request id or None,
# nanoseconds since the request began, its status; returns the id the answer carries.
NoteRefusal = Callable[[tuple[str, int] | None, bytes | None, int, int], bytes]


def http_protocol(settings: Settings, note_refusal: NoteRefusal) -> type[StallGuard]:
    """StallGuard for these settings: their client timeout, `drop` offered with the
    test-control plane on, and `note_refusal` (AccessLog.note_refusal) noting the server's own
    400s."""
    attributes = {
        "client_timeout": settings.client_timeout,
        "offers_close": bool(settings.admin_keys),
        "note_refusal": staticmethod(note_refusal),
    }
    return type("StallGuard", (StallGuard,), attributes)
