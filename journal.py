"""The request journal: a bounded ring of what was sent under /v1, with no credential in it."""

from __future__ import annotations

import collections
import datetime
import itertools
import time
from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from routing import REQUEST_ID, STATUS, route_path
from schemas import JOURNAL_BODY_LIMIT, JournalEntry

# Never kept: they carry credentials.
_UNRECORDED_HEADERS: Final = frozenset({b"authorization", b"cookie", b"proxy-authorization"})
REDACTED: Final = "[redacted]"


class Recorded(NamedTuple):
    """A request as the ring keeps it: raw values, formatted only when somebody reads them."""

    seq: int
    time_ns: int  # wall clock, when it arrived
    method: str
    path: str
    query: bytes
    status: int | None  # None: no answer (the connection was dropped)
    duration_ns: int
    request_id: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes | None  # createPet's, at most JOURNAL_BODY_LIMIT + 1 bytes (one more: truncated)


class Journal:
    """The last `size` requests, oldest first. Recording one costs a tuple and a filtered
    header list; the JSON is built when the journal is read. Keys of any kind (API or admin)
    are kept out: the credential headers are never stored, and a key found anywhere else (a
    query, another header, a body) is replaced by "[redacted]" when entries are read."""

    def __init__(self, size: int, secrets: Iterable[str]) -> None:
        self.ring: collections.deque[Recorded] = collections.deque(maxlen=size)
        self.sequence = itertools.count(1)
        self.dropped = 0
        self.secrets = tuple(secret for secret in secrets if secret)

    def record(
        self,
        scope: Scope,
        time_ns: int,
        duration_ns: int,
        body: bytes | None,
    ) -> None:
        if len(self.ring) == self.ring.maxlen:
            self.dropped += 1
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        self.ring.append(
            Recorded(
                next(self.sequence),
                time_ns,
                scope["method"],
                route_path(scope),
                scope["query_string"],
                scope.get(STATUS),
                duration_ns,
                scope[REQUEST_ID],
                [header for header in headers if header[0] not in _UNRECORDED_HEADERS],
                body,
            )
        )

    def clear(self) -> None:
        self.ring.clear()
        self.dropped = 0

    def entries(
        self,
        method: str | None = None,
        path: str | None = None,
        status: int | None = None,
        limit: int | None = None,
    ) -> list[JournalEntry]:
        """The entries that match every filter given, oldest first; the newest `limit` of them."""
        chosen = [
            recorded
            for recorded in self.ring
            if (method is None or recorded.method == method)
            and (path is None or recorded.path == path)
            and (status is None or recorded.status == status)
        ]
        if limit is not None:
            chosen = chosen[len(chosen) - limit :] if limit < len(chosen) else chosen
        return [self._entry(recorded) for recorded in chosen]

    def _redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _entry(self, recorded: Recorded) -> JournalEntry:
        headers: dict[str, str] = {}
        for name, value in recorded.headers:
            key = name.decode("latin-1")
            text = self._redact(value.decode("latin-1"))
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        entry = JournalEntry(
            seq=recorded.seq,
            time=_rfc3339(recorded.time_ns),
            method=recorded.method,
            path=self._redact(recorded.path),
            query=self._redact(recorded.query.decode("latin-1")),
            status=recorded.status,
            durationMs=round(recorded.duration_ns / 1e6, 3),
            requestId=self._redact(recorded.request_id.decode("latin-1")),
            headers=headers,
        )
        if recorded.body is not None:
            kept = recorded.body[:JOURNAL_BODY_LIMIT]
            entry.body = self._redact(kept.decode("utf-8", errors="replace"))
            if len(recorded.body) > JOURNAL_BODY_LIMIT:
                entry.bodyTruncated = True
        return entry


def _rfc3339(time_ns: int) -> str:
    moment = datetime.datetime.fromtimestamp(time_ns / 1e9, tz=datetime.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


class JournalRecorder:
    """Records every request under /v1 (401s and 404s included) in the journal, with
    createPet's body, which it copies (up to the limit) as the handler reads it."""

    def __init__(self, app: ASGIApp, journal: Journal, body_paths: Sequence[str]) -> None:
        self.app = app
        self.journal = journal
        self.body_paths = frozenset(body_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = route_path(scope) if scope["type"] == "http" else ""
        if not (path.startswith("/v1/") or path == "/v1"):
            await self.app(scope, receive, send)
            return
        arrived, started = time.time_ns(), time.perf_counter_ns()
        body: bytearray | None = None
        if scope["method"] == "POST" and path in self.body_paths:
            body = bytearray()
            receive = _copying(receive, body)
        try:
            await self.app(scope, receive, send)
        finally:
            elapsed = time.perf_counter_ns() - started
            self.journal.record(scope, arrived, elapsed, None if body is None else bytes(body))


def _copying(receive: Receive, copy: bytearray) -> Receive:
    """`receive`, copying the body into `copy` until it holds one byte more than the limit."""

    async def receive_and_copy() -> Message:
        message = await receive()
        room = JOURNAL_BODY_LIMIT + 1 - len(copy)
        if room > 0 and message["type"] == "http.request":
            copy.extend(message.get("body", b"")[:room])
        return message

    return receive_and_copy
