"""The test-control plane: a tenant's journal and fault rules, `Prefer`, and the /_admin routes."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import random
import re
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec
from msgspec.structs import asdict
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import Scope

import schemas
from observability import REDACTED
from openapi import admin_openapi_document
from protocol import DROP
from schemas import JOURNAL_BODY_LIMIT, ApiError, ErrorCode, JSONResponse, NewFaultRule, invalid
from settings import Settings
from store import PetStore, ResetUnavailable

ADDED_HEADERS: Final = "petstore.added_headers"  # scope key: headers added to the response start
STATUS: Final = "petstore.status"  # scope key, present with None: the request was dropped
UNRECORDED_HEADERS: Final = frozenset({b"authorization", b"cookie", b"proxy-authorization"})
JOURNAL_FILTERS: Final = ("limit", "method", "path", "status")
_JSON_ESCAPES: Final = dict(zip('"\\/\b\f\n\r\t', '"\\/bfnrt', strict=True))
_PREFERENCES: Final = {"code": "status", "delay": "delayMs"}  # Prefer's name: the rule's field


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
        longest_first = sorted(filter(None, secrets), key=len, reverse=True)
        forms = ("".join(map(_json_form, secret)) for secret in longest_first)
        self.secrets = re.compile("|".join(forms) or "(?!)", re.I)
        # A body's start past the cut by the most a secret takes escaped: one across it is whole.
        self.body_kept = JOURNAL_BODY_LIMIT + 12 * max(map(len, longest_first), default=0)

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

    def entries(self, **wanted: str | int | None) -> list[schemas.JournalEntry]:
        """The entries whose fields equal each filter not None, in the order they arrived."""
        wanted = {name: value for name, value in wanted.items() if value is not None}
        arrived = sorted(self.ring, key=lambda entry: entry.time)  # the ring's order is their ends'
        return [entry for entry in arrived if wanted.items() <= asdict(entry).items()]

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


class Faults:
    """The fault rules in force, oldest first; `chance` draws for `probability`."""

    def __init__(self, chance: Callable[[], float] = random.random) -> None:
        self.chance = chance
        self.rules: list[schemas.FaultRule] = []
        self.ids = itertools.count(1)

    def add(self, rule: NewFaultRule) -> schemas.FaultRule:
        """A rule in force from now on; the caller checked it (`check_rule`)."""
        added = schemas.FaultRule(**asdict(rule), id=next(self.ids))
        self.rules.append(added)
        return added

    def remove(self, rule_id: int) -> bool:
        before, self.rules = self.rules, [rule for rule in self.rules if rule.id != rule_id]
        return len(self.rules) < len(before)

    def clear(self) -> None:
        self.rules = []

    async def intercept(self, request: Request, operation: str) -> Response | None:
        """Apply the request's `Prefer`, else the first rule that takes it; None: go on."""
        if (found := _preferred(request) or self._take(operation)) is None:
            return None
        rule, message = found
        deadline = time.perf_counter() + (rule.delayMs or 0) / 1000
        # A deadline, not one sleep: the loop's timers count whole milliseconds, may wake early.
        while (left := deadline - time.perf_counter()) > 0:  # noqa: ASYNC110 - no event to wait on
            await asyncio.sleep(left)
        if rule.drop is True:
            request.scope["extensions"][DROP]["close"]()
            request.scope[STATUS] = None  # closed: this empty answer goes nowhere
            return Response()
        if rule.status is msgspec.UNSET:
            return None
        headers = {} if rule.retryAfter is msgspec.UNSET else {"Retry-After": str(rule.retryAfter)}
        return schemas.error_response(rule.status, ErrorCode.INJECTED_FAULT, message, headers)

    def _take(self, operation: str) -> tuple[schemas.FaultRule, str] | None:
        """The first rule for `operation` whose draw succeeds, its `times` counted down."""
        for position, rule in enumerate(self.rules):
            if rule.operation not in (operation, "*"):
                continue
            if rule.probability is not msgspec.UNSET and not self.chance() < rule.probability:
                continue
            if rule.times == 1:
                del self.rules[position]
            elif rule.times is not msgspec.UNSET:
                self.rules[position] = msgspec.structs.replace(rule, times=rule.times - 1)
            return rule, f"Injected by fault rule {rule.id}"
        return None


def check_rule(rule: NewFaultRule, scope: Scope) -> None:
    """Refuse a rule whose fields don't go together, or a drop where the connection can't."""
    drop = rule.drop is True
    if rule.status is msgspec.UNSET and rule.delayMs is msgspec.UNSET and not drop:
        raise invalid("A fault rule needs `status`, `delayMs` or `drop`: true")
    if rule.status is not msgspec.UNSET and drop:
        raise invalid("`status` and `drop` exclude each other")
    if rule.retryAfter is not msgspec.UNSET and rule.status not in schemas.RETRY_AFTER_STATUSES:
        raise invalid(f"`retryAfter` goes only with a `status` in {schemas.RETRY_AFTER_STATUSES}")
    if drop and DROP not in scope.get("extensions", {}):
        raise invalid("`drop` needs the service's own HTTP protocol: start it as `python app.py`")


def _preferred(request: Request) -> tuple[NewFaultRule, str] | None:
    """The fault the request's `Prefer` headers ask for (RFC 7240), noted as applied."""
    first: dict[str, str] = {}  # the headers are one list, in which a preference's first counts
    for preference in ",".join(request.headers.getlist("prefer")).split(","):
        name, _, value = preference.split(";")[0].partition("=")
        first.setdefault(name.strip().lower(), value.strip().strip('"'))
    fields: dict[str, int] = {}
    for name, value in first.items():
        with contextlib.suppress(KeyError, ValueError):  # not ours, not a number, out of bounds
            msgspec.convert({"operation": "*", _PREFERENCES[name]: int(value)}, NewFaultRule)
            fields[name] = int(value)
    if not fields:
        return None
    applied = ", ".join(f"{name}={number}" for name, number in fields.items())
    request.scope.setdefault(ADDED_HEADERS, []).append((b"preference-applied", applied.encode()))
    rule = {"operation": "*", **{_PREFERENCES[name]: number for name, number in fields.items()}}
    return msgspec.convert(rule, NewFaultRule), f"Injected by Prefer: {applied}"


@dataclass
class Tenant:
    """One isolated world: its pets, journal and fault rules (None: not kept), keys in flight."""

    store: PetStore
    journal: Journal | None = None
    faults: Faults | None = None
    keys_in_flight: set[str] = field(default_factory=set)


class Plane:
    """The /_admin routes: a tenant's reset, journal and fault rules; the plane's document."""

    def __init__(self, default: Tenant, settings: Settings) -> None:
        self.default, self.settings = default, settings

    def routes(self) -> list[BaseRoute]:
        route, admin = schemas.Route, schemas.ADMIN_PREFIX
        return [
            route(f"{admin}/reset", self.reset, methods=["POST"]),
            route(f"{admin}/requests", self.requests, methods=["GET", "DELETE"]),
            route(f"{admin}/faults", self.faults, methods=["GET", "POST", "DELETE"]),
            route(f"{admin}/faults/{{ruleId}}", self.faults, methods=["DELETE"]),
            route(schemas.ADMIN_OPENAPI_PATH, self.openapi, methods=["GET"]),
        ]

    def tenant(self, request: Request) -> Tenant:
        """The tenant a request acts on: the configured API keys' one."""
        return self.default

    async def reset(self, request: Request) -> Response:
        """The store back to its start, the journal and the fault rules emptied."""
        tenant = self.tenant(request)
        try:
            pets = tenant.store.reset()
        except ResetUnavailable as error:
            raise ApiError(409, ErrorCode.RESET_UNAVAILABLE, str(error)) from None
        for kept in (tenant.journal, tenant.faults):
            if kept is not None:
                kept.clear()
        return JSONResponse(schemas.ResetDone(pets))

    async def requests(self, request: Request) -> Response:
        """The journal, filtered, oldest first (GET); emptied (DELETE)."""
        journal = self.tenant(request).journal or Journal(0, ())  # none kept: reads empty
        if request.method == "DELETE":
            journal.clear()
            return Response(status_code=204)
        params = request.query_params
        if unknown := sorted(set(params) - set(JOURNAL_FILTERS)):  # misspelled, it matched all
            names = ", ".join(f"`{name}`" for name in JOURNAL_FILTERS)
            raise invalid(f"Query parameter `{unknown[0]}` is not one of {names}")
        status, limit = _number(request, "status", 100, 599), _number(request, "limit", 1)
        method, path = params.get("method"), params.get("path")
        found = journal.entries(method=method and method.upper(), path=path, status=status)
        return JSONResponse(schemas.Journal(found[-limit:] if limit else found, journal.dropped))

    async def faults(self, request: Request) -> Response:
        """The rules (GET), a rule added (POST, 201), all or the `ruleId` one removed (DELETE)."""
        faults = self.tenant(request).faults
        assert faults is not None  # every tenant of the plane has fault rules
        if request.method == "GET":
            return JSONResponse(faults.rules)
        if request.method == "POST":
            rule = schemas.decode(await request.body(), NewFaultRule)
            check_rule(rule, request.scope)
            return JSONResponse(faults.add(rule), 201)
        if (text := request.path_params.get("ruleId")) is None:
            faults.clear()
        elif not (text.isdecimal() and len(text) < 20 and faults.remove(int(text))):
            raise ApiError(404, ErrorCode.NOT_FOUND, "No fault rule has this id")
        return Response(status_code=204)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(admin_openapi_document(request.scope.get("root_path", "")))


def _number(request: Request, name: str, low: int, high: int | None = None) -> int | None:
    """A query parameter's whole number from `low` to `high`, None when absent; else a 400."""
    if (text := request.query_params.get(name)) is None:
        return None
    # Ten digits are past every bound, and int() refuses more than 4,300.
    number = int(text.lstrip("0")[:10] or "0") if text.isascii() and text.isdigit() else -1
    if number < low or (high is not None and number > high):
        bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise invalid(f"Query parameter `{name}` must be a whole number {bounds}")
    return number
