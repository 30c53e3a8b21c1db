"""The test-control plane's endpoints under /_admin: reset, the request journal, fault rules."""

from __future__ import annotations

from typing import Final

from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope

from faults import CLOSE_EXTENSION, Faults, check_rule
from journal import Journal
from openapi import admin_openapi_document
from parsing import decode_fault_rule, integer, query, read_body, require_json
from routing import Endpoint, JSONResponse, NoContent, Refused, invalid
from schemas import ErrorCode, ResetDone, encoder
from store import PetStore, ResetUnavailable

ADMIN_PREFIX: Final = "/_admin"
ADMIN_OPENAPI_PATH: Final = f"{ADMIN_PREFIX}/openapi.json"
_JOURNAL_FILTERS: Final = frozenset({"method", "path", "status", "limit"})
_RULE_BODY_LIMIT: Final = 64 * 1024


class ControlPlane:
    """What integration environments drive between tests: the store back to its start, the
    journal read and cleared, fault rules made and removed. Mounted only with an admin key."""

    def __init__(self, store: PetStore, journal: Journal | None, faults: Faults) -> None:
        self.store = store
        self.journal = journal
        self.faults = faults
        self.openapi_cache: dict[str, bytes] = {}

    def routes(self) -> list[Route]:
        return [
            Route(f"{ADMIN_PREFIX}/reset", Endpoint({"POST": self.reset})),
            Route(
                f"{ADMIN_PREFIX}/requests",
                Endpoint({"GET": self.list_requests, "DELETE": self.clear_requests}),
            ),
            Route(
                f"{ADMIN_PREFIX}/faults",
                Endpoint(
                    {"GET": self.list_faults, "POST": self.add_fault, "DELETE": self.clear_faults}
                ),
            ),
            Route(f"{ADMIN_PREFIX}/faults/{{ruleId}}", Endpoint({"DELETE": self.remove_fault})),
            Route(ADMIN_OPENAPI_PATH, Endpoint({"GET": self.openapi})),
        ]

    async def reset(self, scope: Scope, receive: Receive) -> Response:
        try:
            pets = self.store.reset()
        except ResetUnavailable as error:
            raise Refused(409, ErrorCode.RESET_UNAVAILABLE, str(error)) from None
        if self.journal is not None:
            self.journal.clear()
        self.faults.clear()
        return JSONResponse(encoder.encode(ResetDone(pets=pets)))

    async def list_requests(self, scope: Scope, receive: Receive) -> Response:
        filters = query(scope["query_string"], _JOURNAL_FILTERS)
        status = limit = None
        if "status" in filters:
            status = integer(filters["status"])
            if status is None or not 100 <= status <= 599:
                raise invalid("Query parameter `status` must be an HTTP status, 100 to 599")
        if "limit" in filters:
            limit = integer(filters["limit"])
            if limit is None or limit < 1:
                raise invalid("Query parameter `limit` must be a positive integer")
        if self.journal is None:  # --journal-size 0: nothing is recorded
            return JSONResponse(b'{"requests":[],"dropped":0}')
        entries = self.journal.entries(
            method=filters["method"].upper() if "method" in filters else None,
            path=filters.get("path"),
            status=status,
            limit=limit,
        )
        body = encoder.encode({"requests": entries, "dropped": self.journal.dropped})
        return JSONResponse(body)

    async def clear_requests(self, scope: Scope, receive: Receive) -> Response:
        if self.journal is not None:
            self.journal.clear()
        return NoContent()

    async def list_faults(self, scope: Scope, receive: Receive) -> Response:
        return JSONResponse(encoder.encode(self.faults.rules))

    async def add_fault(self, scope: Scope, receive: Receive) -> Response:
        require_json(scope)
        rule = decode_fault_rule(await read_body(scope, receive, _RULE_BODY_LIMIT))
        check_rule(rule)
        if rule.drop is True and CLOSE_EXTENSION not in (scope.get("extensions") or {}):
            raise invalid(
                "`drop` needs the service's own HTTP protocol: run `python app.py`, or uvicorn "
                "with `--http app:StallGuard`"
            )
        added = self.faults.add(rule)
        location = f"{scope.get('root_path', '')}{ADMIN_PREFIX}/faults/{added.id}"
        return JSONResponse(encoder.encode(added), 201, [(b"location", location.encode())])

    async def clear_faults(self, scope: Scope, receive: Receive) -> Response:
        self.faults.clear()
        return NoContent()

    async def remove_fault(self, scope: Scope, receive: Receive) -> Response:
        rule_id = integer(scope["path_params"]["ruleId"])
        if rule_id is None or not self.faults.remove(rule_id):
            raise Refused(404, ErrorCode.NOT_FOUND, "No fault rule has this id")
        return NoContent()

    async def openapi(self, scope: Scope, receive: Receive) -> Response:
        root_path = scope.get("root_path", "")
        if root_path not in self.openapi_cache:
            self.openapi_cache[root_path] = encoder.encode(admin_openapi_document(root_path))
        return JSONResponse(self.openapi_cache[root_path])
