"""The test-control plane: tenants, their fault rules and `Prefer`, and the /_admin routes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec
from msgspec.structs import asdict
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute
from starlette.types import Scope

import schemas
from journal import Journal
from observability import key_digest, tenant_key
from openapi import admin_openapi_document
from protocol import DROP
from schemas import ApiError, ErrorCode, JSONResponse, NewFaultRule, invalid
from settings import Settings
from store import MemoryStore, PetStore, ResetUnavailable, seed_pets

ADDED_HEADERS: Final = "petstore.added_headers"  # scope key: headers added to the response start
STATUS: Final = "petstore.status"  # scope key, present with None: the request was dropped
JOURNAL_FILTERS: Final = ("limit", "method", "path", "status", "atLeast", "waitMs")
_PREFERENCES: Final = {"code": "status", "delay": "delayMs"}  # Prefer's name: the rule's field


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
    """One isolated world: its pets, journal and fault rules (None: not kept), keys in flight;
    for a tenant the plane made, its id, its key's digest and its times (Unix)."""

    store: PetStore
    journal: Journal | None = None
    faults: Faults | None = None
    keys_in_flight: set[str] = field(default_factory=set)
    id: str = ""
    digest: bytes = b""
    created: float = 0.0
    used: float = 0.0  # a request with its key, or on its /_admin/tenants/{id} paths

    @classmethod
    def kept(cls, store: PetStore, settings: Settings) -> Tenant:
        """A tenant whose journal (unless --journal-size 0) and fault rules are kept."""
        size = settings.journal_size
        return cls(store, Journal(size, settings.secrets) if size else None, Faults())

    def info(self) -> schemas.TenantInfo:
        created, used = schemas.rfc3339(self.created), schemas.rfc3339(self.used)
        return schemas.TenantInfo(self.id, self.store.count, created, used)


class Plane:
    """The /_admin routes: the tenants; a tenant's reset, journal and fault rules (the plane's
    own paths act on `default`, the configured keys' tenant); the plane's document. `keys`
    maps a key's digest to its tenant: the auth's dictionary, which minting fills. `read_json`
    reads a POST's body as createPet's is read."""

    def __init__(
        self,
        default: Tenant,
        settings: Settings,
        keys: dict[bytes, Tenant],
        read_json: Callable[[Request], Awaitable[bytes]],
    ) -> None:
        self.default, self.settings, self.keys, self.read_json = default, settings, keys, read_json
        self.tenants: dict[str, Tenant] = {}  # by id, oldest first
        self.sweeper: asyncio.TimerHandle | None = None

    def routes(self) -> list[BaseRoute]:
        route, admin, each = schemas.Route, schemas.ADMIN_PREFIX, "/tenants/{tenantId}"
        return [
            *(route(f"{admin}{own}/reset", self.reset, methods=["POST"]) for own in ("", each)),
            *(
                route(f"{admin}{own}{path}", handler, methods=methods)
                for own in ("", each)
                for path, handler, methods in (
                    ("/requests", self.requests, ["GET", "DELETE"]),
                    ("/faults", self.faults, ["GET", "POST", "DELETE"]),
                    ("/faults/{ruleId}", self.faults, ["DELETE"]),
                )
            ),
            route(f"{admin}/tenants", self.all_tenants, methods=["GET", "POST"]),
            route(f"{admin}{each}", self.one_tenant, methods=["GET", "DELETE"]),
            route(schemas.ADMIN_OPENAPI_PATH, self.openapi, methods=["GET"]),
        ]

    def tenant(self, request: Request) -> Tenant:
        """The tenant a request acts on: the one of its path's `tenantId`, a use of it (a 404
        if there is none), else the configured keys' one."""
        if (tenant_id := request.path_params.get("tenantId")) is None:
            return self.default
        if (tenant := self.tenants.get(tenant_id)) is None:
            raise ApiError(404, ErrorCode.NOT_FOUND, "No tenant has this id")
        tenant.used = time.time()
        return tenant

    async def all_tenants(self, request: Request) -> Response:
        """Every tenant (GET); a new one, from its own seed or the service's (POST, 201)."""
        if request.method == "GET":
            return JSONResponse(schemas.TenantList([t.info() for t in self.tenants.values()]))
        new = schemas.decode(await self.read_json(request), schemas.NewTenant)
        try:
            seed = self.default.store.seed if new.pets is msgspec.UNSET else seed_pets(new.pets)
        except ValueError as error:
            raise invalid(f"$.pets: {error}") from None
        if len(self.tenants) >= self.settings.max_tenants:
            most = self.settings.max_tenants
            raise ApiError(409, ErrorCode.TENANT_LIMIT_REACHED, f"At most {most} tenants at once")
        key, tenant = tenant_key(), Tenant.kept(MemoryStore(seed), self.settings)
        tenant.id, tenant.digest = secrets.token_hex(8), key_digest(key.encode())
        tenant.created = tenant.used = time.time()
        self.tenants[tenant.id] = self.keys[tenant.digest] = tenant
        if self.sweeper is None:
            self.sweeper = asyncio.get_running_loop().call_later(1, self.sweep)
        where = f"{request.scope.get('root_path', '')}{schemas.ADMIN_PREFIX}/tenants/{tenant.id}"
        created = schemas.TenantCreated(tenant.id, key, len(seed))
        return JSONResponse(created, 201, {"Location": where})

    async def one_tenant(self, request: Request) -> Response:
        """A tenant (GET); deleted, its key refused from now on (DELETE, 204)."""
        tenant = self.tenant(request)
        if request.method == "GET":
            return JSONResponse(tenant.info())
        self.delete(tenant)
        return Response(status_code=204)

    def end_waits(self) -> None:
        """The service stops: every journal read that waits answers now."""
        for tenant in (self.default, *self.tenants.values()):
            if tenant.journal is not None:
                tenant.journal.close()

    def delete(self, tenant: Tenant) -> None:
        del self.tenants[tenant.id], self.keys[tenant.digest]
        if tenant.journal is not None:
            tenant.journal.close()

    def sweep(self) -> None:
        """Delete the tenants unused for --tenant-idle-seconds; look again in a second while
        any is left (minting starts it again)."""
        idle_since = time.time() - self.settings.tenant_idle_seconds
        for tenant in [t for t in self.tenants.values() if t.used < idle_since]:
            self.delete(tenant)
        self.sweeper = (
            asyncio.get_running_loop().call_later(1, self.sweep) if self.tenants else None
        )

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
        """The journal, filtered, oldest first, once `atLeast` entries match or `waitMs` ran
        out (GET); emptied (DELETE)."""
        journal = self.tenant(request).journal or Journal(0, ())  # none kept: reads empty
        if request.method == "DELETE":
            journal.clear()
            return Response(status_code=204)
        params = request.query_params
        if unknown := sorted(set(params) - set(JOURNAL_FILTERS)):  # misspelled, it matched all
            names = ", ".join(f"`{name}`" for name in JOURNAL_FILTERS)
            raise invalid(f"Query parameter `{unknown[0]}` is not one of {names}")
        status, limit = _number(request, "status", 100, 599), _number(request, "limit", 1)
        at_least, wait_ms = (
            _number(request, "atLeast", 1, 1000),
            _number(request, "waitMs", 0, 60_000),
        )
        method, path = params.get("method"), params.get("path")
        wanted = {"method": method and method.upper(), "path": path, "status": status}
        wanted = {name: value for name, value in wanted.items() if value is not None}
        if at_least:
            await journal.wait(wanted, at_least, (wait_ms or 0) / 1000)
        found = journal.entries(wanted)
        complete = msgspec.UNSET if at_least is None else len(found) >= at_least
        return JSONResponse(
            schemas.Journal(found[-limit:] if limit else found, journal.dropped, complete)
        )

    async def faults(self, request: Request) -> Response:
        """The rules (GET), a rule added (POST, 201), all or the `ruleId` one removed (DELETE)."""
        faults = self.tenant(request).faults
        assert faults is not None  # every tenant of the plane has fault rules
        if request.method == "GET":
            return JSONResponse(faults.rules)
        if request.method == "POST":
            rule = schemas.decode(await self.read_json(request), NewFaultRule)
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
