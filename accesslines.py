"""The access log's lines, text or JSON: a client's fields kept to one each, secrets out."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Final

import msgspec

from redaction import REDACTED, redact
from schemas import encoder, rfc3339, wall_minus_perf_counter_ns


class AccessLine(msgspec.Struct):
    """An access-log line under --log-format json (the fields in this order)."""

    time: str  # when the request arrived, RFC 3339 UTC
    client: str | None
    method: str | None  # None, as the path: a 400 of the server's own, to bytes it couldn't parse
    path: str | None
    status: int | None  # None: no answer (a fault's `drop`, a client gone mid-body)
    durationUs: int  # camelCase: the contract's names
    requestId: str


# A status as a text line writes it (None: dropped, no answer), for HTTP's every three digits:
# looked up rather than formatted (a line cost 5.4k instructions, 4.5k with this and the
# paths' check by bytes.translate; bench/HISTORY.md).
_STATUS_TEXT: Final = {None: "-"} | {status: str(status) for status in range(100, 1000)}
# A request as the access log notes it: client, method, path, status (None: dropped, no
# answer), duration (ns), request id, and when it arrived (time.perf_counter_ns).
Entry = tuple[tuple[str, int] | None, str, str, int | None, int, tuple[bytes, bytes], int]


def as_json(entries: list[Entry]) -> str:
    """The entries' lines in JSON (AccessLine)."""
    offset = wall_minus_perf_counter_ns()
    lines = [
        AccessLine(
            rfc3339(started + offset),
            client[0] if client else None,
            None if method == "-" else method,  # no method is "-", and no path
            None if path == "-" else path,
            status,
            elapsed // 1000,
            request_id[1].decode("latin-1"),
        )
        for client, method, path, status, elapsed, request_id, started in entries
    ]
    return encoder.encode_lines(lines).decode()


def as_text(entries: list[Entry]) -> str:
    """The entries' lines in text. A path is decoded (%0A is a line break): one that is not
    all printable, or holds a quote or a backslash, is escaped, so that a client can't write
    a line of its own, fields of its own within its quotes, or a terminal's escape sequence.
    The chunk's paths are checked at once (joined: the checks run in C), each path only when
    one of them needs it; in ASCII, as paths are, byte by byte (isprintable looks each
    character up)."""
    paths = "".join([entry[2] for entry in entries])
    check = not paths.isascii() or bool(paths.encode().translate(None, _PLAIN_ASCII))
    return "".join(
        [
            f"{client[0] if client else '-'} "
            f'"{method} {escaped(path) if check and not _plain(path) else path}" '
            f"{_STATUS_TEXT[status]} {elapsed // 1000}us {request_id[1].decode('latin-1')}\n"
            for client, method, path, status, elapsed, request_id, _ in entries
        ]
    )


def one_field_clients(text: str, entries: list[Entry]) -> str:
    r"""The entries' text lines (`text`) with each client's address one field: one from
    X-Forwarded-For, which a client writes, is escaped as a path is when it holds a space, a
    tab, a quote, a backslash (which would pass for an escape) or a character that is not
    printable (`` is a line break to some). ASCII, five spaces and two quotes a line, no
    tab and no backslash, looked for in C (550 instructions a line), tell that none does; a
    path or a request id with one of them has the chunk's addresses looked at one by one."""
    lines = len(entries)
    if (
        text.isascii()
        and text.count(" ") == 5 * lines
        and text.count('"') == 2 * lines
        and "\t" not in text
        and "\\" not in text
    ):
        return text
    return as_text([_client_escaped(entry) for entry in entries])


def _client_escaped(entry: Entry) -> Entry:
    """The entry with its client's address escaped as a path is, and its spaces as `\\x20`,
    unless it goes into a text line as it is, one field."""
    client = entry[0]
    if client is None or (_plain(client[0]) and " " not in client[0]):
        return entry
    return ((escaped(client[0]).replace(" ", "\\x20"), client[1]), *entry[1:])


def encoded_secrets_out(entry: Entry, secrets: Sequence[str]) -> Entry:
    """The entry with its request id, and its client's address (X-Forwarded-For's, from a
    proxy FORWARDED_ALLOW_IPS names), written REDACTED where one hides a secret in its
    percent-encoding."""
    client, method, path, status, elapsed, request_id, started = entry
    if _hides_secret(request_id[1].decode("latin-1"), secrets):
        request_id = (request_id[0], REDACTED.encode())
    if client and _hides_secret(client[0], secrets):
        client = (REDACTED, client[1])
    return client, method, path, status, elapsed, request_id, started


def _hides_secret(text: str, secrets: Sequence[str]) -> bool:
    decoded = urllib.parse.unquote(text)
    return "%" in text and redact(decoded, secrets) != decoded


# The bytes an ASCII path holds that go into a text line as they are (_plain).
_PLAIN_ASCII: Final = bytes(set(range(0x20, 0x7F)) - set(b'"\\'))


def _plain(path: str) -> bool:
    """Whether a path goes into a text line as it is."""
    return path.isprintable() and '"' not in path and "\\" not in path


def json_escaped(text: str) -> str:
    """`text` as it is inside a JSON string msgspec writes."""
    return encoder.encode(text).decode()[1:-1]


def escaped(text: str) -> str:
    """`text` with each character Python would not print as is written as its escape (`\\n`,
    `\\x1b`, `\\u202e`), and a quote and a backslash escaped with a backslash; the rest as it
    is (`é` stays `é` beside a line break)."""
    return "".join(
        char if char.isprintable() and char not in '"\\' else _escape(char) for char in text
    )


def _escape(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    return char.encode("unicode_escape").decode("ascii")
