"""The journal: the last requests under /v1, no secret in them, and reads that wait for more."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import re
import urllib.parse
from collections.abc import Sequence
from typing import Any, Final

import msgspec
from msgspec.structs import asdict
from starlette.types import Scope

import schemas
from observability import REDACTED, TENANT_KEY_PREFIX
from schemas import JOURNAL_BODY_LIMIT

UNRECORDED_HEADERS: Final = frozenset({b"authorization", b"cookie", b"proxy-authorization"})
_JSON_ESCAPES: Final = dict(zip('"\\/\b\f\n\r\t', '"\\/bfnrt', strict=True))
Filters = dict[str, Any]  # an entry's fields and the values they must have


def _json_form(char: str) -> str:
    """A pattern for `char` as JSON may write it: itself or escaped."""
    units = char.encode("utf-16-be").hex()
    escaped = "".join(rf"\\u{units[i : i + 4]}" for i in range(0, len(units), 4))
    short = [re.escape("\\" + _JSON_ESCAPES[char])] if char in _JSON_ESCAPES else []
    return f"(?:{'|'.join([re.escape(char), escaped, *short])})"


class Journal:
    """The last `size` requests under /v1, each secret in them (in any case) written REDACTED."""

    def __init__(self, size: int, secrets: Sequence[str]) -> None:
        self.ring: collections.deque[schemas.JournalEntry] = collections.deque(maxlen=size)
        self.numbers = itertools.count(1)
        self.dropped = 0  # entries the ring pushed out since the last clear
        self.waiters: list[tuple[Filters, asyncio.Future[None]]] = []
        self.closed = False
        longest_first = sorted(filter(None, secrets), key=len, reverse=True)
        forms = ["".join(map(_json_form, secret)) for secret in longest_first]
        minted = "".join(map(_json_form, TENANT_KEY_PREFIX)) + r"(?:[\w-]|\\u00[0-9a-f]{2}){43}"
        self.secrets = re.compile("|".join([*forms, minted]), re.I)
        # A body's start past the cut by the most a secret takes escaped: one across it is whole.
        self.body_kept = JOURNAL_BODY_LIMIT + 12 * max(map(len, [*longest_first, "x" * 46]))

    def clear(self) -> None:
        self.ring.clear()
        self.dropped = 0

    def record(  # noqa: PLR0913, PLR0917 - what the middleware knows of a request once it ended
        self,
        scope: Scope,
        status: int | None,
        started: float,
        duration: float,
        request_id: str,
        body: bytes | None,
    ) -> None:
        """Keep a request that ended (`started` at, Unix time; `status` None: dropped)."""
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            if raw_name not in UNRECORDED_HEADERS:
                name, value = self._hide(raw_name), self._hide(raw_value)
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
        query = "&".join(map(self._hide, scope["query_string"].split(b"&")))
        entry = schemas.JournalEntry(
            seq=next(self.numbers),
            time=schemas.rfc3339(started),
            method=self._hide(scope["method"]),
            path=self._hide(scope["path"].removeprefix(scope.get("root_path", ""))),
            query=self._hide(query),  # a secret across parameters: the query decoded whole
            status=status,
            durationMs=round(duration * 1000, 3),
            requestId=self._hide(request_id),
            headers=headers,
            body=msgspec.UNSET if body is None else self._body(body),
            bodyTruncated=True if len(body or b"") > JOURNAL_BODY_LIMIT else msgspec.UNSET,
        )
        self.dropped += len(self.ring) == self.ring.maxlen  # a full ring pushes its oldest out
        self.ring.append(entry)
        fields = asdict(entry) if self.waiters else {}
        for wanted, future in self.waiters:  # wake the readers this entry may complete
            if wanted.items() <= fields.items() and not future.done():
                future.set_result(None)

    def entries(self, wanted: Filters) -> list[schemas.JournalEntry]:
        """The entries whose fields have the values `wanted` gives, in the order they arrived."""
        arrived = sorted(self.ring, key=lambda entry: entry.time)  # the ring's order is their ends'
        return [entry for entry in arrived if wanted.items() <= asdict(entry).items()]

    async def wait(self, wanted: Filters, at_least: int, seconds: float) -> bool:
        """Until `at_least` entries match `wanted` or `seconds` pass: whether they do. Each new
        entry that matches wakes the wait to count again; nothing runs in between."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while len(self.entries(wanted)) < at_least:
            if self.closed or (left := deadline - loop.time()) <= 0:
                return False
            waiter = (wanted, loop.create_future())
            self.waiters.append(waiter)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter[1], left)
            finally:
                self.waiters.remove(waiter)
        return True

    def close(self) -> None:
        """The journal is gone (its tenant deleted): every wait ends now."""
        self.closed = True
        for _, future in self.waiters:
            if not future.done():
                future.set_result(None)

    def _hide(self, raw: str | bytes) -> str:
        """`raw` as text, each secret redacted, also percent-encoded (`+` read both ways)."""
        text = raw if isinstance(raw, str) else raw.decode(errors="replace")
        text = self.secrets.sub(REDACTED, text)
        for unquote in (urllib.parse.unquote, urllib.parse.unquote_plus):
            if self.secrets.search(decoded := unquote(text)):
                text = self.secrets.sub(REDACTED, decoded)
        return text

    def _body(self, body: bytes) -> str:
        """The body's text, cut at the limit; a secret across the cut is redacted whole."""
        text = body[: self.body_kept].decode(errors="replace")
        end = len(body[:JOURNAL_BODY_LIMIT].decode(errors="replace"))
        for found in self.secrets.finditer(text):
            if found.start() < end < found.end():
                end = found.end()
        kept = self.secrets.sub(REDACTED, text[:end]).encode()[:JOURNAL_BODY_LIMIT]
        return kept.decode(errors="ignore")  # the mark cut too: no piece of a secret given out
