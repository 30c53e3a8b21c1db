"""The request journal: a bounded ring of what was sent under /v1, with no credential in it."""

from __future__ import annotations

import collections
import copy
import itertools
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

import msgspec
from starlette.types import Scope

from redaction import REDACTED, longest_first, redact, redact_encoded
from routing import BODY, route_path
from schemas import (
    API_PREFIX,
    HEADERS_KEPT,
    JOURNAL_BODY_LIMIT,
    JournalEntry,
    rfc3339,
    wall_minus_perf_counter_ns,
)

# The paths under API_PREFIX: from these up to (not including) those (Journal.record).
_UNDER_API: Final = f"{API_PREFIX}/"
_PAST_API: Final = f"{API_PREFIX}0"
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


# What the ring keeps of a request: the fields of Recorded.
_Packed = tuple[
    int, int, int, str, int | None, bytes | None, str, bytes, list[tuple[bytes, bytes]], bytes, bool
]
_pack: Final = msgspec.msgpack.Encoder().encode
_unpack: Final = msgspec.msgpack.Decoder(_Packed).decode
# msgspec hands out the buffer it grew, about 1.5 times what it holds past a few hundred
# bytes; a larger entry is copied to its size (2.2k instructions). Under HEADERS_KEPT.
_COPIED_OVER: Final = 512


class Journal:
    """The last `size` requests under /v1 to end, each kept as one bytes object (MessagePack),
    given out in the order they arrived (a request held by a delay is numbered as it arrives,
    and in the journal once it ends). The JSON is built when the journal is read, and only
    then are the credential headers left out and every configured secret (keys of both kinds,
    the database's password) found elsewhere (a query, another header, a body, the path)
    replaced by REDACTED: no secret is ever in what the journal gives out.

    Why one bytes object: a request's values kept as they were (a tuple of about a dozen
    objects: its path, its headers and their tuples, its numbers, ...) took 408 bytes a
    getPet against 210 packed (tracemalloc), kept alive for a thousand requests and each
    object freed cold. Packing costs about 2.6k instructions more than the tuple, and still
    wins on time: six rounds of fresh processes (plane off, packed, tuple), getPet plane on /
    off 0.962 packed against 0.931 kept as a tuple, packed ahead in five of six (README,
    Performance). What a kept object costs in caches, instructions don't show."""

    def __init__(self, size: int, secrets: Iterable[str]) -> None:
        self.ring: collections.deque[bytes] = collections.deque(maxlen=size)
        # AccessLog numbers each request as it arrives (seq: those under /v1 have gaps where
        # others came between them); `recorded` counts those under /v1 that ended.
        self.numbers = itertools.count(1)
        self.recorded = 0
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
    def dropped(self) -> int:
        """Entries the ring pushed out since the last clear."""
        return self.recorded - self.cleared_at - len(self.ring)

    def record(  # noqa: PLR0913, PLR0917 - what AccessLog has at hand, in one call a request
        self,
        scope: Scope,
        seq: int,
        started_ns: int,
        duration_ns: int,
        status: int | None,
        request_id: bytes,
    ) -> None:
        """Note a request that ended, if it was under /v1: its scope, its number (seq) as it
        arrived, when it arrived (time.perf_counter_ns), how long it took, its status (None:
        no answer) and request id (which AccessLog has at hand). The body it read
        (parsing.read_body left it in the scope) is cut to `body_kept` bytes: what the journal
        gives out, and room for a secret that straddles the cut."""
        path: str = scope["path"]
        if scope.get("root_path"):  # route_path only then: a call less for most requests
            path = route_path(scope)
        # Under /v1: from "/v1/" up to "/v10" ("0" follows "/"), as middleware.Credentials
        # tells its prefix (str.startswith parses its arguments as a tuple: 1k instructions).
        if not (_UNDER_API <= path < _PAST_API or path == API_PREFIX):
            return
        body = None
        if BODY in scope:  # one chunk: joined and cut without a copy
            body = b"".join(scope[BODY])[: self.body_kept]
        self.recorded += 1
        fields = [
            seq,
            started_ns,
            duration_ns,
            path,
            status,
            body,
            scope["method"],
            scope["query_string"],
            scope["headers"],
            request_id,
            False,
        ]
        packed = _pack(fields)
        if len(packed) > _COPIED_OVER:  # most entries are not: one look for them
            # Only a packed entry past HEADERS_KEPT may hold too much of a head (a create's
            # body alone keeps it under): only then are its headers measured.
            kept = _headers_kept(scope["headers"]) if len(packed) > HEADERS_KEPT else None
            if kept is not None:
                fields[-3:] = [kept, request_id, True]
                packed = _pack(fields)
            packed = bytes(memoryview(packed))  # msgspec's grown buffer: 6.3 KB for 4.2 KB
        self.ring.append(packed)

    def copy(self) -> Journal:
        """The journal as it is now, for a thread to read while the loop records on."""
        copied = copy.copy(self)
        copied.ring = collections.deque(self.ring, self.ring.maxlen)
        return copied

    def clear(self) -> None:
        self.cleared_at = self.recorded
        self.ring.clear()

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
            for recorded in self._unpacked(self.ring)
            if (method is None or recorded.method == method)
            and (path is None or recorded.path == path)
            and (status is None or recorded.status == status)
            and (wanted_id is None or recorded.request_id == wanted_id)
        ]
        if limit is not None:
            chosen = chosen[len(chosen) - limit :] if limit < len(chosen) else chosen
        offset = wall_minus_perf_counter_ns()
        return [self._entry(recorded, offset) for recorded in chosen]

    @staticmethod
    def _unpacked(ring: Iterable[bytes]) -> list[Recorded]:
        """The entries in the order their requests arrived (the ring's is that of their ends)."""
        return sorted(Recorded(*_unpack(packed)) for packed in ring)

    def _redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def _redact_encoded(self, text: str, decode: Callable[[str], str]) -> str:
        return redact_encoded(text, self.secrets, decode)

    def _redact_query(self, query: str) -> str:
        """A query with each secret redacted, as sent or hidden in a parameter's encoding: that
        parameter is given out decoded, the others as sent (decoded whole, `q=a%26b` read as
        two parameters, and `+` as a space)."""
        decode = urllib.parse.unquote_plus
        redacted = "&".join(
            self._redact_encoded(parameter, decode) for parameter in self._redact(query).split("&")
        )
        # A secret holding a raw "&" (a database password may) spans two parameters: the
        # query is then given out decoded whole.
        return self._redact_encoded(redacted, decode)

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
