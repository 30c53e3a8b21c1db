"""Faults on demand: rules made by the test-control plane, and `Prefer: code=` / `delay=`."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

import msgspec
from starlette.responses import Response
from starlette.types import Receive, Scope

from parsing import read_body_start
from routing import PREFER, Interception, Unanswered, error_response, invalid
from schemas import (
    DELAY_MAX_MS,
    INJECTABLE_STATUSES,
    RETRY_AFTER_STATUSES,
    ErrorCode,
    FaultRule,
    NewFaultRule,
    Operation,
)

# The ASGI scope extension through which the HTTP protocol (protocol.StallGuard) lets the app
# close the connection without a byte of answer ({"close": callable}); uvicorn has no way.
CLOSE_EXTENSION: Final = "petstore.close"


@dataclass(frozen=True, slots=True)
class Fault:
    """What to do to one request: wait, then answer a status or drop the connection (or go on)."""

    delay_ms: int = 0
    status: int | None = None
    drop: bool = False
    retry_after: int | None = None
    rule_id: int | None = None  # None: asked for by the request's own Prefer header
    applied: str = ""  # Preference-Applied, for a Prefer fault


def check_rule(rule: NewFaultRule) -> None:
    """What the Struct can't check: that a rule does something, and which fields go together
    (the control plane's OpenAPI document says the same in JSON Schema: openapi.py)."""
    drop = rule.drop is True
    if rule.status is msgspec.UNSET and rule.delayMs is msgspec.UNSET and not drop:
        raise invalid("A fault rule needs `status`, `delayMs` or `drop`: true")
    if rule.status is not msgspec.UNSET and drop:
        raise invalid("`status` and `drop` exclude each other")
    if rule.retryAfter is not msgspec.UNSET and rule.status not in RETRY_AFTER_STATUSES:
        statuses = " or ".join(map(str, RETRY_AFTER_STATUSES))
        raise invalid(f"`retryAfter` goes only with `status` {statuses}")


class Faults:
    """The rules in force, in creation order, and the interceptor (routing.Endpoint calls it for
    each request of the three operations that has a Prefer header or comes while there are
    rules, after the credential check and before the body is read) that applies the request's
    `Prefer`, else the first rule that matches. An injected status answers `injected_fault`
    and carries nothing out.

    All of it runs on the event loop, between two awaits, so taking a rule and counting down
    its `times` is one step: a rule with `times: N` serves exactly N requests however many
    arrive at once. `journaled`: how much of an injected create's body to read first, for the
    journal (Journal.body_kept; 0, none): the attempt a retry is compared with; none of one
    whose Content-Length is over `max_body`."""

    def __init__(self, chance: Callable[[], float], journaled: int, max_body: int) -> None:
        self.chance = chance  # a draw in [0, 1); tests inject their own
        self.journaled = journaled
        self.max_body = max_body
        self.rules: list[FaultRule] = []
        self.ids = itertools.count(1)

    def add(self, rule: NewFaultRule) -> FaultRule:
        """A rule in force from now on; the caller checked it (check_rule), before anything
        else of the request, so that a rule that is wrong is told so first."""
        fields = msgspec.structs.asdict(rule)
        if fields["drop"] is False:
            fields["drop"] = msgspec.UNSET  # `drop: false` does nothing: not shown
        added = FaultRule(**fields, id=next(self.ids))
        self.rules.append(added)
        return added

    def remove(self, rule_id: int) -> bool:
        before = len(self.rules)
        self.rules = [rule for rule in self.rules if rule.id != rule_id]
        return len(self.rules) < before

    def clear(self) -> None:
        self.rules = []

    def intercept(
        self, scope: Scope, receive: Receive, operations: Mapping[str, str]
    ) -> Awaitable[Interception] | None:
        """None for a request without a fault (most requests, decided without an await), else
        the wait and the Interception. `operations`: the operation of each method here."""
        prefer = scope.get(PREFER)  # every Prefer header, joined: AccessLog found them
        fault = None if prefer is None else preferred_fault(prefer.decode("latin-1"))
        if fault is None:
            if not self.rules:
                return None
            fault = self.take(Operation(operations[scope["method"]]))
            if fault is None:
                return None
        return self._apply(fault, scope, receive)

    async def _apply(self, fault: Fault, scope: Scope, receive: Receive) -> Interception:
        if fault.delay_ms:  # the loop serves others meanwhile
            deadline = time.perf_counter() + fault.delay_ms / 1000
            # uvloop's timers count whole milliseconds from a clock read before: a wait may
            # end a millisecond early, and the journal said 99.6 ms for a delay of 100.
            while (left := deadline - time.perf_counter()) > 0:  # noqa: ASYNC110 - a time
                await asyncio.sleep(left)
        if fault.drop:
            await _drop(scope, receive)
            return Interception(Unanswered())
        if fault.status is not None:
            if self.journaled and scope["method"] == "POST":  # nothing of it is carried out
                await read_body_start(scope, receive, self.journaled, self.max_body)
            return Interception(_injected(fault))
        if not fault.applied:  # a rule's delay: no Prefer to answer
            return Interception(None)
        return Interception(None, [(b"preference-applied", fault.applied.encode())])

    def take(self, operation: Operation) -> Fault | None:
        """The fault of the first rule for `operation` whose draw succeeds; counts it down."""
        for position, rule in enumerate(self.rules):
            if rule.operation not in (operation, Operation.ANY):
                continue
            if rule.probability is not msgspec.UNSET and not self.chance() < rule.probability:
                continue
            if rule.times is not msgspec.UNSET:
                if rule.times == 1:
                    del self.rules[position]
                else:
                    self.rules[position] = msgspec.structs.replace(rule, times=rule.times - 1)
            return Fault(
                delay_ms=0 if rule.delayMs is msgspec.UNSET else rule.delayMs,
                status=None if rule.status is msgspec.UNSET else rule.status,
                drop=rule.drop is True,
                retry_after=None if rule.retryAfter is msgspec.UNSET else rule.retryAfter,
                rule_id=rule.id,
            )
        return None


def preferred_fault(prefer: str) -> Fault | None:
    """The fault a `Prefer` header asks for (RFC 7240): `code=` one of the injectable statuses,
    `delay=` milliseconds within bounds; anything else in it is ignored, and so is a preference
    given again (only its first instance counts, RFC 7240, 2)."""
    status, delay_ms, applied = None, 0, []
    seen = set()
    for preference in prefer.split(","):
        name, _, value = preference.split(";")[0].strip().partition("=")
        name, value = name.strip().lower(), value.strip().strip('"')
        if name in seen:
            continue
        seen.add(name)
        # Past 9 digits a number is out of every bound (and int() refuses more than 4,300 digits).
        if not value.isascii() or not value.isdigit() or len(value.lstrip("0")) > 9:
            continue
        if name == "code" and int(value) in INJECTABLE_STATUSES:
            status = int(value)
            applied.append(f"code={status}")
        elif name == "delay" and int(value) <= DELAY_MAX_MS:
            delay_ms = int(value)
            applied.append(f"delay={delay_ms}")
    if not applied:
        return None
    return Fault(delay_ms=delay_ms, status=status, applied=", ".join(applied))


def _injected(fault: Fault) -> Response:
    assert fault.status is not None
    by = f"fault rule {fault.rule_id}" if fault.rule_id else f"Prefer: {fault.applied}"
    headers = {}
    if fault.retry_after is not None:
        headers["Retry-After"] = str(fault.retry_after)
    if fault.applied:
        headers["Preference-Applied"] = fault.applied
    return error_response(fault.status, ErrorCode.INJECTED_FAULT, f"Injected by {by}", headers)


async def _drop(scope: Scope, receive: Receive) -> None:
    """Close the connection without an answer (lingering: what the client still sends is read
    and dropped, so that it sees the end of our side, never a reset), then wait until the
    server has seen it go, so that it does not answer a 500 of its own for a request the app
    left unanswered."""
    scope["extensions"][CLOSE_EXTENSION]["close"]()
    while (await receive())["type"] != "http.disconnect":
        pass
