"""The access log and request ids: AccessLog, outermost but RootPath (its lines: accesslines.py)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
import time
from collections.abc import Iterator, Sequence
from secrets import token_hex
from typing import Final, TextIO

from starlette.types import ASGIApp, Receive, Scope, Send

from accesslines import (
    Entry,
    as_json,
    as_text,
    encoded_secrets_out,
    escaped,
    json_escaped,
    one_field_clients,
)
from journal import PAST_API, UNDER_API, Journal
from logs import write_stdout
from metrics import OTHER, RequestCounts
from redaction import longest_first, redact
from routing import (
    BODY,
    REQUEST_ID_HEADER,
    SENT_REQUEST_ID,
    STATUS,
    cut_off,
    internal_error,
    note_request_header,
    route_path,
)
from schemas import API_PREFIX

logger = logging.getLogger("petstore")

# X-Request-Id as the contract takes it from a client: 1 to 128 visible ASCII characters.
REQUEST_ID: Final = re.compile(rb"[\x21-\x7e]{1,128}")


def client_request_id(value: bytes) -> bytes | None:
    """A client's X-Request-Id value as the service takes it (whitespace after it is not part
    of it), None when it is not usable. AccessLog.__call__ has it inline: a call less a request."""
    sent = value.rstrip(b" \t")
    return sent if REQUEST_ID.fullmatch(sent) else None


# The last two hex digits of the ids this process makes (AccessLog.refill_ids).
_ID_ENDINGS: Final = tuple(b"%02x" % ending for ending in range(256))
_ID_HEADER_NAME: Final = b"x-request-id"
_PREFER: Final = b"prefer"


# Lines formatted between two turns of the event loop: about 0.2 ms of work.
_LINES_A_CHUNK: Final = 256
# How often the lines are written (the lifespan's drain_every): a request's fields wait at
# most this long for theirs. Every 0.5 s, thousands of requests' fields stayed alive at once,
# which cost throughput (bench/HISTORY.md, 2026-11-24).
LOG_EVERY: Final = 0.05


class AccessLog:
    """One line per request (client, method, path, status, duration in microseconds, request
    id), never a header; no lines at all when `stream` is None (log level warning and above).

    Being the outermost of our layers (but RootPath, which only moves the path), it gives each
    request its id (scope[REQUEST_ID_HEADER]): the client's own X-Request-Id when that is 1 to
    128 visible ASCII characters, else one made of a per-process random prefix and a counter
    (made 256 at a time; uuid4 costs two microseconds).

    A request costs one tuple appended to a list; `drain()`, which the lifespan calls every 50
    ms (LOG_EVERY), turns them into lines and writes them, 256 at a time. Writing each line
    as its request ended, through a `send` wrapper that caught the status, cost 3 % of a
    getPet's instructions more (bench/instructions.py); stdlib logging costs tens of
    microseconds. Being the layer that sees how each request ended, it also answers the
    last-resort 500 when one failed before any response, and, with the test-control plane on,
    notes the request in the journal: a layer of its own cost a request a clock and an await
    more. With metrics on, it notes each request's duration for metrics.RequestCounts (a dict
    lookup, an append). `json_lines`: each line one JSON object (AccessLine) instead of text.
    `secrets` (Settings.secrets: the keys and the database's password) never reach the log: one
    a client sends in a path or a request id is `[redacted]`.
    """

    def __init__(  # noqa: PLR0913 - each argument past the stream is one optional feature
        self,
        app: ASGIApp,
        stream: TextIO | None,
        journal: Journal | None = None,
        counts: RequestCounts | None = None,
        *,
        json_lines: bool = False,
        secrets: Sequence[str] = (),
        prefer: bool = False,
        forwarded: bool = False,
    ) -> None:
        self.app = app
        # The headers its one look through a request's finds: the request id's, and with
        # `prefer` (the test-control plane on) the Prefer ones, which the faults read from
        # scope[PREFER] (a second look, theirs, cost a getPet 1k instructions more).
        self.sought = frozenset({_ID_HEADER_NAME, _PREFER} if prefer else {_ID_HEADER_NAME})
        self.stream = stream
        self.journal = journal
        self.counts = counts
        self.json_lines = json_lines
        self.forwarded = forwarded  # a client's address may come from X-Forwarded-For
        # Each secret as the lines write it: a path is escaped in the text (a password may
        # hold a quote), and JSON escapes its own; redacted in the chunk.
        escape = json_escaped if json_lines else escaped
        self.secrets = longest_first(form for s in secrets if s for form in (s, escape(s)))
        self.plain_secrets = longest_first(secrets)
        self.entries: list[Entry] = []
        self.id_prefix = token_hex(4).encode() + b"-"
        self.id_blocks = itertools.count(1)  # of 256 ids: the counter's digits but the last two
        self.made_ids: Iterator[tuple[bytes, bytes]] = iter(())

    def refill_ids(self) -> tuple[bytes, bytes]:
        """Make the next 256 of the ids this process makes, as headers, and give the first:
        the prefix and a hex counter whose last two digits come from a table (made once),
        joined and split in one go, each paired with the header's name as zip takes it.
        Formatting each id as its request came (`b"%s%x" % ...`) cost about as much as all the
        rest of a request's id."""
        head = b"%s%x" % (self.id_prefix, next(self.id_blocks))
        ids = (head + (b" " + head).join(_ID_ENDINGS)).split()
        self.made_ids = zip(itertools.repeat(_ID_HEADER_NAME), ids, strict=False)
        return next(self.made_ids)

    def note_refusal(
        self,
        client: tuple[str, int] | None,
        request_id: bytes | None,
        elapsed_ns: int,
        status: int = 400,
    ) -> bytes:
        """Note a request the server answered itself, never passing through this layer: a 400
        to bytes it can't parse (protocol.StallGuard), a 413 to a Content-Length past 64 bits.
        Its line has `-` for the method and the path, the metrics count it as method and route
        `other`; its id is the client's (given when usable) or one made now, and is returned."""
        header = (
            (_ID_HEADER_NAME, request_id)
            if request_id is not None
            else next(self.made_ids, None) or self.refill_ids()
        )
        if self.counts is not None:
            self.counts.pending[OTHER, OTHER, status].append(elapsed_ns)
        if self.stream:
            started = time.perf_counter_ns() - elapsed_ns
            self.entries.append((client, "-", "-", status, elapsed_ns, header, started))
        return header[1]

    # One function on purpose: each helper it called was a Python call more for every request.
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: PLR0912
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter_ns()
        request_id = None
        if SENT_REQUEST_ID not in scope:  # the server did not note it as it parsed the head
            # (h11, a test's transport): one look for both (a try whose KeyError came on every
            # request cost such a server 2k instructions)
            scope[SENT_REQUEST_ID] = None
            sought = self.sought
            for name, value in scope["headers"]:  # each costs about 450 instructions
                if name in sought:
                    note_request_header(scope, name, value)
        sent = scope[SENT_REQUEST_ID]
        if sent is not None:  # client_request_id inline: a call less a request
            sent = sent.rstrip(b" \t")
            if REQUEST_ID.fullmatch(sent):
                request_id = (_ID_HEADER_NAME, sent)
        if request_id is None:
            request_id = next(self.made_ids, None) or self.refill_ids()
        scope[REQUEST_ID_HEADER] = request_id
        # Numbered as it arrives for the journal, which notes it as it ends.
        seq = next(self.journal.numbers) if self.journal is not None else 0
        try:
            await self.app(scope, receive, send)
        except (Exception, asyncio.CancelledError) as error:
            # Cancelled: the shutdown's grace ran out (uvicorn said so, once), no fault of the
            # app's, so no traceback; answered, the task ends as it was asked to.
            cancelled = isinstance(error, asyncio.CancelledError)
            if STATUS in scope:  # too late for an Error body: uvicorn closes the connection
                if cancelled:  # mid-answer, to a client not reading it
                    return
                raise  # with the traceback uvicorn logs
            await (cut_off(scope) if cancelled else internal_error(scope))(scope, receive, send)
        finally:
            journal, counts, stream = self.journal, self.counts, self.stream
            if journal is not None or counts is not None or stream:
                elapsed = time.perf_counter_ns() - started
                status = scope.get(STATUS, 500)
                if journal is not None:  # the test-control plane is on; None: no answer sent
                    # Under /v1 (its path without the root path), into the journal: the
                    # fields of journal.Recorded, inline (a method of Journal's cost about 1k
                    # instructions more a request, bench/stack.py).
                    path = scope["path"]
                    if scope.get("root_path"):  # route_path only then: a call less
                        path = route_path(scope)
                    if UNDER_API <= path < PAST_API or path == API_PREFIX:
                        pending = journal.pending
                        pending.append(
                            [
                                seq,
                                started,
                                elapsed,
                                path,
                                status,
                                # the body read, as far as the journal keeps it
                                b"".join(scope[BODY])[: journal.body_kept]
                                if BODY in scope
                                else None,
                                scope["method"],
                                scope["query_string"],
                                scope["headers"],
                                request_id[1],
                                False,  # headers cut: Journal.pack's to say
                            ]
                        )
                        if len(pending) >= journal.batch:
                            journal.pack()
                if counts is not None:  # inline, not a method of RequestCounts: a call less
                    route = scope.get("route")  # routed, or a 401 (IndexedRouter.route_headers)
                    template = route.path if route is not None else counts.unrouted(scope)
                    counts.pending[scope["method"], template, status].append(elapsed)
                if stream:
                    self.entries.append(
                        (
                            scope.get("client"),
                            scope["method"],
                            scope["path"],
                            status,
                            elapsed,
                            request_id,
                            started,
                        )
                    )

    def flush(self) -> None:
        """Write out the lines of the requests that ended since the last flush, all at once
        (at shutdown; `drain` is what the lifespan runs meanwhile)."""
        entries, self.entries = self.entries, []
        self._write(self._lines(entries))
        self._flush_stream()

    async def drain_every(self, seconds: float) -> None:
        """Drain, every `seconds`, until cancelled (the lifespan's task)."""
        while True:
            await asyncio.sleep(seconds)
            await self.drain()

    async def drain(self) -> None:
        """Write out the lines of the requests that ended since the last call, formatted a
        chunk at a time, letting the event loop serve requests between two chunks (formatting
        half a second's lines in one go, 15,000 at 30,000 requests a second, held the loop for
        milliseconds and tripled the p99 of everything waiting behind it), then written in one
        go: each write wakes the stream's thread (logs.Outlet), which then takes the GIL.
        Cancelled between two chunks (the lifespan's end cancels the task that drains), it
        writes what it formatted and puts the rest back, first, for flush()."""
        entries, self.entries = self.entries, []
        lines: list[str] = []
        try:
            for start in range(0, len(entries), _LINES_A_CHUNK):
                lines.append(self._lines(entries[start : start + _LINES_A_CHUNK]))
                await asyncio.sleep(0)  # the requests that arrived meanwhile go first
        finally:
            self.entries[:0] = entries[len(lines) * _LINES_A_CHUNK :]
            self._write("".join(lines))
            self._flush_stream()

    def _lines(self, entries: list[Entry]) -> str:
        text = self._formatted(entries)
        # A "%" (rare): a request id or a client's address may hide a secret in its encoding,
        # which nobody decodes (the server decodes a path); such a field is written REDACTED.
        if "%" in text and self.plain_secrets:
            entries = [encoded_secrets_out(entry, self.plain_secrets) for entry in entries]
            text = self._formatted(entries)
        return redact(text, self.secrets)  # one a client put in a path or a request id

    def _formatted(self, entries: list[Entry]) -> str:
        if self.json_lines:
            return as_json(entries)
        text = as_text(entries)
        return one_field_clients(text, entries) if self.forwarded else text

    def _write(self, text: str) -> None:
        if self.stream is None or not text:
            return
        try:
            self.stream.write(text)
        except (OSError, ValueError) as error:
            self._stop(error)

    def _flush_stream(self) -> None:
        if self.stream is None:
            return
        try:
            self.stream.flush()
        except (OSError, ValueError) as error:
            self._stop(error)

    def announce(self, text: str) -> bool:
        """Write the service's own lines on stdout (the ready line, a generated key's), before
        any line of the access log; whether they were written. If stdout can't be written, it
        is said once and the access log stops, as when a write of its lines fails; the service
        goes on serving."""
        try:
            write_stdout(text)
        except (OSError, ValueError) as error:
            self._stop(error)
            return False
        return True

    def _stop(self, error: Exception) -> None:
        """stdout is closed, or its reader gone: keep serving, and stop noting lines."""
        logger.error("access log stopped: cannot write it: %s", error)
        self.stream = None
