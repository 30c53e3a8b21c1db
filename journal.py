"""The journal: the last requests under /v1, no secret in them, and reads that wait for more."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import re
import urllib.parse
from collections.abc import Sequence
from typing import Any, Final

import msgspec
from msgspec.structs import asdict
from starlette.types import Scope

import schemas
from observability import REDACTED, TENANT_KEY_PREFIX, TENANT_KEY_TOKEN
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


@dataclasses.dataclass
class Waiter:
    """A read waiting for `needed` more entries that match `wanted`."""

    wanted: Filters
    needed: int
    done: asyncio.Future[None]

    def count(self, matched: int) -> None:
        self.needed -= matched
        if self.needed <= 0:
            self.end()

    def end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class Journal:
    """The last `size` requests under /v1, each secret in them (in any case) written REDACTED."""

    def __init__(self, size: int, secrets: Sequence[str]) -> None:
        self.ring: collections.deque[schemas.JournalEntry] = collections.deque(maxlen=size)
        self.numbers = itertools.count(1)
        self.dropped = 0  # entries the ring pushed out since the last clear
        self.waiters: list[Waiter] = []
        self.closed = False
        longest_first = sorted(filter(None, secrets), key=len, reverse=True)
        forms = ["".join(map(_json_form, secret)) for secret in longest_first]
        prefix = "".join(map(_json_form, TENANT_KEY_PREFIX))
        minted = rf"{prefix}(?:[\w-]|\\u00[0-9a-f]{{2}}){{{TENANT_KEY_TOKEN}}}"
        self.secrets = re.compile("|".join([*forms, minted]), re.I)
        # A body's start past the cut by the most a secret takes escaped: one across it is whole.
        longest = max([len(TENANT_KEY_PREFIX) + TENANT_KEY_TOKEN, *map(len, longest_first)])
        self.body_kept = JOURNAL_BODY_LIMIT + 12 * longest

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
        for waiter in self.waiters:  # count it for the readers it matches; wake those done
            if waiter.wanted.items() <= fields.items():
                waiter.count(1)

    def entries(self, wanted: Filters) -> list[schemas.JournalEntry]:
        """The entries whose fields have the values `wanted` gives, in the order they arrived."""
        arrived = sorted(self.ring, key=lambda entry: entry.time)  # the ring's order is their ends'
        return [entry for entry in arrived if wanted.items() <= asdict(entry).items()]

    async def wait(self, wanted: Filters, at_least: int, seconds: float) -> None:
        """Until `at_least` entries match `wanted` (those here count), or `seconds` pass, or the
        journal closes. Nothing runs meanwhile: each new entry counts for the waits it matches."""
        if self.closed or not self.ring.maxlen:  # none will come
            return
        waiter = Waiter(wanted, at_least, asyncio.get_running_loop().create_future())
        waiter.count(len(self.entries(wanted)))
        self.waiters.append(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.done, seconds)
        finally:
            self.waiters.remove(waiter)

    def close(self) -> None:
        """No more entries will come (the tenant is deleted, or the service stops): every wait
        ends now, and every later one at once."""
        self.closed = True
        for waiter in self.waiters:
            waiter.end()

    def _hide(self, raw: str | bytes) -> str:
        """`raw` as text, each secret redacted, also percent-encoded (`+` read both ways)."""
        text = raw if isinstance(raw, str) else raw.decode(errors="replace")
        text = self.secrets.sub(REDACTED, text)
        if "%" not in text and "+" not in text:  # nothing is encoded: done
            return text
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
