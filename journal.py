"""The request journal: a bounded ring of what was sent under /v1, with no credential in it."""

from __future__ import annotations

import collections
import datetime
import functools
import time
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

from starlette.types import Scope

from routing import BODY, REQUEST_ID_HEADER, STATUS, route_path
from schemas import JOURNAL_BODY_LIMIT, JournalEntry

# Never given out: they carry credentials.
_UNRECORDED_HEADERS: Final = frozenset({b"authorization", b"cookie", b"proxy-authorization"})
REDACTED: Final = "[redacted]"


class Recorded(NamedTuple):
    """A request as the journal gives it out, before it is turned into JSON."""

    seq: int
    started_ns: int  # time.perf_counter_ns() when it arrived
    duration_ns: int
    path: str  # without the root path
    status: int | None  # None: no answer (the connection was dropped)
    # createPet's (the one body read under /v1), cut to JOURNAL_BODY_LIMIT + 1 bytes (one
    # more: truncated); None when none was read (a 401, an injected status).
    body: bytes | None
    method: str
    query: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    request_id: bytes


# What the ring keeps of a request: the fields of Recorded but its number, which its place in
# the ring tells, and its headers as a tuple (of tuples of bytes) instead of uvicorn's list.
_Kept = tuple[
    int, int, str, int | None, bytes | None, str, bytes, tuple[tuple[bytes, bytes], ...], bytes
]


class Journal:
    """The last `size` requests under /v1, oldest first, each kept as a tuple of its values.
    The JSON is built when the journal is read, and only then are the credential headers left
    out and any key of any kind (API or admin) found elsewhere (a query, another header, a
    body, the path) replaced by "[redacted]": no key is ever in what the journal gives out.

    Why a tuple of tuples: nothing in an entry is a container the garbage collector keeps
    tracking (it stops tracking a tuple of bytes, ints and str at its first young collection),
    so a thousand entries add nothing to its older generations; uvicorn's header list would
    have stayed tracked. Packed into one MessagePack bytes object instead (kept from
    2026-11-24 10:19 to 15:50), an entry took 210 bytes against 408 but cost 2.6k instructions
    more a request: 1.8k-3.9k more for the whole plane, by bench/instructions.py's counting
    (README, Performance); the time packing seemed to save was within what two processes of one
    program differ by (the twin)."""

    def __init__(self, size: int, secrets: Iterable[str]) -> None:
        self.ring: collections.deque[_Kept] = collections.deque(maxlen=size)
        self.recorded = 0  # since the start: the number (seq) of the newest entry
        self.cleared_at = 0  # the number of the newest entry at the last clear
        # Entries note the monotonic clock (which the access log reads anyway); this turns
        # it into the wall clock when they are read.
        self.wall_minus_monotonic_ns = time.time_ns() - time.perf_counter_ns()
        self.secrets = tuple(secret for secret in secrets if secret)

    @property
    def dropped(self) -> int:
        """Entries the ring pushed out since the last clear."""
        return self.recorded - self.cleared_at - len(self.ring)

    def record(self, scope: Scope, started_ns: int, duration_ns: int) -> None:
        """Note a request that ended, if it was under /v1: its scope, when it arrived
        (time.perf_counter_ns), how long it took. The body it read (parsing.read_body left
        it in the scope) is cut to what the journal gives out, and one byte more."""
        path: str = scope["path"]
        if scope.get("root_path"):  # route_path only then: a call less for most requests
            path = route_path(scope)
        # Under /v1: from "/v1/" up to "/v10" ("0" follows "/"), as middleware.Credentials
        # tells its prefix (str.startswith parses its arguments as a tuple: 1k instructions).
        if not ("/v1/" <= path < "/v10" or path == "/v1"):
            return
        body = None
        if (chunks := scope.get(BODY)) is not None:  # one chunk: joined and cut without a copy
            body = b"".join(chunks)[: JOURNAL_BODY_LIMIT + 1]
        self.recorded += 1
        self.ring.append(
            (
                started_ns,
                duration_ns,
                path,
                scope.get(STATUS),
                body,
                scope["method"],
                scope["query_string"],
                tuple(scope["headers"]),
                scope[REQUEST_ID_HEADER][1],
            )
        )

    def clear(self) -> None:
        self.cleared_at = self.recorded
        self.ring.clear()

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
            for recorded in self._recorded()
            if (method is None or recorded.method == method)
            and (path is None or recorded.path == path)
            and (status is None or recorded.status == status)
        ]
        if limit is not None:
            chosen = chosen[len(chosen) - limit :] if limit < len(chosen) else chosen
        return [self._entry(recorded) for recorded in chosen]

    def _recorded(self) -> Iterator[Recorded]:
        first = self.recorded - len(self.ring) + 1
        for seq, kept in enumerate(self.ring, first):
            yield Recorded(seq, *kept)

    def _redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def _entry(self, recorded: Recorded) -> JournalEntry:
        headers: dict[str, str] = {}
        for name, value in recorded.headers:
            if name in _UNRECORDED_HEADERS:
                continue
            key = name.decode("latin-1")
            text = self._redact(value.decode("latin-1"))
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        entry = JournalEntry(
            seq=recorded.seq,
            time=rfc3339(recorded.started_ns + self.wall_minus_monotonic_ns),
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


def rfc3339(time_ns: int) -> str:
    """A wall-clock time (ns since the epoch) as RFC 3339 in UTC, to the microsecond (cut, not
    rounded). The date and time to the second are made once a second: a datetime made and
    formatted for each of the access log's JSON lines cost 21k instructions, 4x this."""
    seconds, ns = divmod(time_ns, 1_000_000_000)
    return f"{_to_the_second(seconds)}.{ns // 1000:06d}Z"


@functools.lru_cache(maxsize=4)
def _to_the_second(seconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")
