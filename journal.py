"""The request journal: a bounded ring of what was sent under /v1, with no credential in it."""

from __future__ import annotations

import collections
import copy
import itertools
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

import msgspec

from redaction import REDACTED, longest_first, redact, redact_encoded
from schemas import (
    API_PREFIX,
    HEADERS_KEPT,
    JOURNAL_BODY_LIMIT,
    JournalEntry,
    rfc3339,
    wall_minus_perf_counter_ns,
)

# The paths the journal records: API_PREFIX and those from UNDER_API up to (not including)
# PAST_API ("0" follows "/"), as middleware.Credentials tells its prefix (str.startswith parses
# its arguments as a tuple: 1k instructions).
UNDER_API: Final = f"{API_PREFIX}/"
PAST_API: Final = f"{API_PREFIX}0"
# Never given out: they carry credentials.
_UNRECORDED_HEADERS: Final = frozenset({b"authorization", b"cookie", b"proxy-authorization"})


class Recorded(NamedTuple):
    """A request as the journal gives it out, before it is turned into JSON."""

    seq: int  # its number among the requests as they arrived (others come between: gaps)
    started_ns: int  # time.perf_counter_ns() when it arrived
    duration_ns: int
    path: str  # without the root path
    status: int | None  # None: no answer (the connection was dropped)
    # createPet's (the one body read under /v1), cut to Journal.body_kept bytes (more than
    # JOURNAL_BODY_LIMIT: truncated); a create refused before reading it (an injected status,
    # a 409, a 415) reads that much of it first (parsing.read_body_start); None when none was
    # read (a read, a 401, a drop, a client waiting for its `100 Continue`).
    body: bytes | None
    method: str
    query: bytes
    headers: list[tuple[bytes, bytes]]
    request_id: bytes
    headers_cut: bool  # headers past HEADERS_KEPT were left out


# What a batch keeps of each request: the fields of Recorded.
_Packed = tuple[
    int, int, int, str, int | None, bytes | None, str, bytes, list[tuple[bytes, bytes]], bytes, bool
]
_pack: Final = msgspec.msgpack.Encoder().encode
_unpack: Final = msgspec.msgpack.Decoder(list[_Packed]).decode
# Requests packed together, at most (fewer in a smaller journal): msgspec's call and its
# buffer's growth were 1.2k instructions of an entry's 3k packed alone.
BATCH: Final = 32


class Journal:
    """The last `size` requests under /v1 to end, given out in the order they arrived (a
    request held by a delay is numbered as it arrives, and in the journal once it ends). The
    JSON is built when the journal is read, and only then are the credential headers left out
    and every configured secret (keys of both kinds, the database's password) found elsewhere
    (a query, another header, a body, the path) replaced by REDACTED: no secret is ever in
    what the journal gives out.

    AccessLog notes each request that ends under /v1 by appending its fields (in the order of
    Recorded) to `pending`, and calls `pack()` once `batch` are there: they become one bytes
    object (MessagePack), the newest batch. A batch is let go once the batches after it hold
    `size` entries: the journal gives out the newest `size`, and holds at most 2 * (batch -
    1) more (62 with the default 1,000): a ring, packed 32 at a time. Each entry packed alone,
    through a method of the journal's, cost a getPet 2.1k instructions more, 8.0k against
    5.9k for the whole plane (bench/stack.py, bench/HISTORY.md 2026-11-28).

    Why packed: a request's values kept as they were (a tuple of about a dozen objects: its
    path, its headers and their tuples, its numbers, ...) took 408 bytes a getPet against 210
    packed (tracemalloc), kept alive for a thousand requests and each object freed cold.
    Packing costs instructions, and still wins on time: getPet plane on / off 0.962 packed
    against 0.931 kept as tuples in 2026-11-24's rounds, 0.944 against 0.909 measured at once
    on 2026-11-28 (README, Performance). What a kept object costs in caches, instructions
    don't show."""

    def __init__(self, size: int, secrets: Iterable[str]) -> None:
        self.size = size
        self.batch = min(BATCH, size)
        # The fields of the requests noted since the last batch was packed (AccessLog's).
        self.pending: list[list[Any]] = []
        # The packed batches, oldest first, and how many entries each holds.
        self.batches: collections.deque[bytes] = collections.deque()
        self.sizes: collections.deque[int] = collections.deque()
        self.held = 0  # entries in the batches
        self.packed = 0  # entries packed since the start
        # AccessLog numbers each request as it arrives (seq: those under /v1 have gaps where
        # others came between them).
        self.numbers = itertools.count(1)
        self.cleared_at = 0  # what `recorded` was at the last clear
        # Each also as its UTF-8 read as Latin-1, as a header's value, the query and the
        # request id are decoded: a password with a letter past ASCII is written so there.
        self.secrets = longest_first(
            form for s in secrets if s for form in (s, s.encode().decode("latin-1"))
        )
        # A secret in a body as JSON may write it: each character as itself or escaped.
        self.in_json = re.compile("|".join(map(_json_forms, self.secrets)) or "(?!)")
        # A body is kept this far past the limit, so that a key that straddles the cut is
        # found whole (and redacted) before the cut is made: 12 bytes a character at most
        # (a surrogate pair's two escapes).
        self.body_kept = JOURNAL_BODY_LIMIT + 12 * max(map(len, self.secrets), default=0)

    @property
    def recorded(self) -> int:
        """Requests under /v1 that ended since the start."""
        return self.packed + len(self.pending)

    @property
    def count(self) -> int:
        """Entries the journal gives out now: the newest `size` since the last clear."""
        return min(self.held + len(self.pending), self.size)

    @property
    def dropped(self) -> int:
        """Entries the ring pushed out since the last clear."""
        return self.recorded - self.cleared_at - self.count

    def pack(self) -> None:
        """Pack the pending entries as one batch (the headers past HEADERS_KEPT left out),
        then let go of the oldest batches that the newest `size` entries don't reach."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        packed = _pack(pending)
        if len(packed) > HEADERS_KEPT:  # one of them may hold too much of a head
            bodies = sum(len(fields[5]) for fields in pending if fields[5] is not None)
            if len(packed) - bodies > HEADERS_KEPT and any(
                [_cut_headers(fields) for fields in pending]  # each one's, not the first's
            ):
                packed = _pack(pending)
        # Copied to its size: msgspec hands out the buffer it grew, up to half again as large.
        self.batches.append(bytes(memoryview(packed)))
        self.sizes.append(len(pending))
        self.packed += len(pending)
        self.held += len(pending)
        while self.held - self.sizes[0] >= self.size:
            self.batches.popleft()
            self.held -= self.sizes.popleft()

    def copy(self) -> Journal:
        """The journal as it is now, for a thread to read while the loop records on."""
        self.pack()
        copied = copy.copy(self)
        copied.batches = collections.deque(self.batches)
        copied.sizes = collections.deque(self.sizes)
        copied.pending = []  # the loop goes on appending to the journal's own
        return copied

    def clear(self) -> None:
        self.packed += len(self.pending)  # recorded, never to be given out
        self.pending = []
        self.cleared_at = self.packed
        self.batches.clear()
        self.sizes.clear()
        self.held = 0

    def entries(
        self,
        method: str | None = None,
        path: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
        limit: int | None = None,
    ) -> list[JournalEntry]:
        """The entries that match every filter given, oldest first; the `limit` of them that
        arrived last."""
        wanted_id = None if request_id is None else _latin1(request_id)
        chosen = [
            recorded
            for recorded in self._unpacked()
            if (method is None or recorded.method == method)
            and (path is None or recorded.path == path)
            and (status is None or recorded.status == status)
            and (wanted_id is None or recorded.request_id == wanted_id)
        ]
        if limit is not None:
            chosen = chosen[len(chosen) - limit :] if limit < len(chosen) else chosen
        offset = wall_minus_perf_counter_ns()
        return [self._entry(recorded, offset) for recorded in chosen]

    def _unpacked(self) -> list[Recorded]:
        """The newest `size` entries, in the order their requests arrived (the batches' is
        that of their ends)."""
        self.pack()
        ended = [fields for packed in self.batches for fields in _unpack(packed)]
        return sorted(Recorded(*fields) for fields in ended[len(ended) - self.count :])

    def _redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def _redact_encoded(self, text: str, decode: Callable[[str], str]) -> str:
        return redact_encoded(text, self.secrets, decode)

    def _redact_query(self, query: str) -> str:
        """A query with each secret redacted, as sent or hidden in a parameter's encoding: that
        parameter is given out decoded, the others as sent (decoded whole, `q=a%26b` read as
        two parameters). A `+` is read both ways: as a space (a form's encoding) and as itself
        (RFC 3986's, which leaves a key's `+` raw and may encode its `=`)."""
        redacted = "&".join(map(self._redact_parameter, self._redact(query).split("&")))
        # A secret holding a raw "&" (a database password may) spans two parameters: the
        # query is then given out decoded whole.
        return self._redact_parameter(redacted)

    def _redact_parameter(self, text: str) -> str:
        # `+` as itself first: read as a space first, a copy hidden by `%2B` found there would
        # give the parameter out decoded, a literal `+` of another copy a space, found by neither.
        for decode in (urllib.parse.unquote, urllib.parse.unquote_plus):
            text = self._redact_encoded(text, decode)
        return text

    def _redact_name(self, name: str) -> str:
        """A header's name, which the server lower-cases, with any key in it redacted."""
        for secret in self.secrets:
            if secret.lower() in name:
                name = name.replace(secret.lower(), REDACTED)
        return name

    def _entry(self, recorded: Recorded, wall_minus_perf_counter: int) -> JournalEntry:
        headers: dict[str, str] = {}
        for name, value in recorded.headers:
            if name in _UNRECORDED_HEADERS:
                continue
            key = self._redact_name(name.decode("latin-1"))  # a key sent as a header's name
            text = self._redact_encoded(value.decode("latin-1"), urllib.parse.unquote)
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        query = recorded.query.decode("latin-1")
        entry = JournalEntry(
            seq=recorded.seq,
            time=rfc3339(recorded.started_ns + wall_minus_perf_counter),
            method=self._redact(recorded.method),
            path=self._redact(recorded.path),
            query=self._redact_query(query),
            status=recorded.status,
            durationMs=round(recorded.duration_ns / 1e6, 3),
            requestId=self._redact_encoded(
                recorded.request_id.decode("latin-1"), urllib.parse.unquote
            ),  # as the header's value is
            headers=headers,
        )
        if recorded.headers_cut:
            entry.headersTruncated = True
        if recorded.body is not None:
            entry.body = self._body(recorded.body)
            if len(recorded.body) > JOURNAL_BODY_LIMIT:
                entry.bodyTruncated = True
        return entry

    def _body(self, kept: bytes) -> str:
        """A body as the journal gives it out: its first JOURNAL_BODY_LIMIT bytes, with each
        secret in it, as it is or JSON-escaped (`\\u0041bc`), written as REDACTED. The text is
        cut where the limit falls, or past it at the end of a secret that straddles it, then
        redacted, then cut to the limit: nothing read past the limit (where the kept bytes end
        in a piece of a secret) is given out, however much the redaction shortened the text."""
        text = kept.decode("utf-8", errors="replace")
        if len(kept) <= JOURNAL_BODY_LIMIT:
            return self._redact_json(text)
        end = len(kept[:JOURNAL_BODY_LIMIT].decode("utf-8", errors="replace"))
        reach = self.body_kept - JOURNAL_BODY_LIMIT  # the most a secret takes, escaped
        # Only around the cut (the expression tries every secret at every place: with a
        # hundred keys a whole body took 5.8 ms).
        for found in self.in_json.finditer(text, max(0, end - reach), end + reach):
            if found.start() >= end:
                break
            if found.end() > end:
                end = found.end()
                break
        text = self._redact_json(text[:end])
        return text.encode()[:JOURNAL_BODY_LIMIT].decode("utf-8", errors="ignore")

    def _redact_json(self, text: str) -> str:
        """JSON text with each secret in it, as it is or escaped, written as REDACTED. The
        expression only where an escape hides one (it tries every secret at every place: a
        hundred keys made a body of 4 KiB take 5.8 ms)."""
        if "\\" in text:
            unescaped = _unescaped(text)
            if any(secret in unescaped for secret in self.secrets):
                return self.in_json.sub(REDACTED, text)
        return self._redact(text)


def _cut_headers(fields: list[Any]) -> bool:
    """Leave out an entry's headers past HEADERS_KEPT, saying so; whether any were."""
    headers = fields[8]
    if sum(map(len, itertools.chain.from_iterable(headers))) <= HEADERS_KEPT:  # no loop of ours
        return False
    kept = _headers_kept(headers)
    if kept is None:
        return False
    fields[8], fields[10] = kept, True
    return True


def _headers_kept(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]] | None:
    """The headers an entry keeps, whole, in the order sent, until HEADERS_KEPT bytes; None
    when that is all of them."""
    size = 0
    for position, (name, value) in enumerate(headers):
        size += len(name) + len(value)
        if size > HEADERS_KEPT:
            return headers[:position]
    return None


def _latin1(text: str) -> bytes:
    """`text` as a header's bytes; one past Latin-1 is no id a request carried (b"")."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return b""


# A JSON string's short escapes (json.org), by the character they stand for.
_SHORT_ESCAPES: Final = dict(zip('"\\/\b\f\n\r\t', '"\\/bfnrt', strict=True))
_SHORT_ESCAPED: Final = {escape: character for character, escape in _SHORT_ESCAPES.items()}


def _json_forms(secret: str) -> str:
    """A regular expression for `secret` in a JSON string: each character as itself, as its
    \\u escape (a surrogate pair's two past U+FFFF; hex digits in either case) or its short
    escape (\\n, \\/)."""
    characters = []
    for character in secret:
        units = character.encode("utf-16-be").hex()
        escape = "".join(
            r"\\u" + "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in units[i : i + 4])
            for i in range(0, len(units), 4)
        )
        forms = [re.escape(character), escape]
        if character in _SHORT_ESCAPES:
            forms.append(re.escape("\\" + _SHORT_ESCAPES[character]))
        characters.append(f"(?:{'|'.join(forms)})")
    return "".join(characters)


# A JSON string's escapes: \u0041 and \/ and the rest (a key can hide in them in a body).
_JSON_ESCAPE: Final = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')


def _unescaped(text: str) -> str:
    """`text` with JSON's escapes replaced by what they stand for (a surrogate pair's two, by
    their character)."""
    text = _JSON_ESCAPE.sub(
        lambda m: chr(int(m[1], 16)) if m[1] else _SHORT_ESCAPED.get(m[2], m[2]), text
    )
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
