"""The test-control plane under /_admin: reset, the journal, fault rules, and its document."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope

from faults import CLOSE_EXTENSION, Faults, check_rule
from journal import Journal
from openapi import (
    components,
    error,
    internal_response,
    json_content,
    not_json_response,
    string_header,
    unauthorized_response,
    with_request_ids,
)
from parsing import decode_fault_rule, integer, query, read_body, require_json
from routing import Endpoint, JSONResponse, NoContent, Refused, invalid, per_root_path
from schemas import (
    DELAY_MAX_MS,
    RETRY_AFTER_STATUSES,
    Error,
    ErrorCode,
    FaultRule,
    NewFaultRule,
    ResetDone,
    encoder,
)
from schemas import (
    Journal as JournalDocument,
)
from store import PetStore, ResetUnavailable

ADMIN_PREFIX: Final = "/_admin"
ADMIN_OPENAPI_PATH: Final = f"{ADMIN_PREFIX}/openapi.json"
# Any other query parameter is a 400: a filter misspelled, or one that does not exist, would
# pass every request, and a test's assertion on them with it.
_JOURNAL_FILTERS: Final = frozenset({"method", "path", "status", "requestId", "limit"})
_RULE_BODY_LIMIT: Final = 64 * 1024


class ControlPlane:
    """What integration environments drive between tests: the store back to its start, the
    journal read and cleared, fault rules made and removed. Mounted only with an admin key."""

    def __init__(self, store: PetStore, journal: Journal | None, faults: Faults) -> None:
        self.store = store
        self.journal = journal
        self.faults = faults
        self.document = per_root_path(
            lambda root_path: encoder.encode(admin_openapi_document(root_path))
        )

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
        filters = query(scope["query_string"], _JOURNAL_FILTERS, strict=True)
        status = limit = None
        if "status" in filters:
            status = integer(filters["status"])
            if status is None or not 100 <= status <= 599:
                raise invalid("Query parameter `status` must be an HTTP status, 100 to 599")
        if "limit" in filters:
            text = filters["limit"]
            if not (text.isascii() and text.isdigit() and text.strip("0")):
                raise invalid("Query parameter `limit` must be a positive integer")
            limit = integer(text)  # None past 19 digits: more than any journal holds, so all
        if self.journal is None:  # --journal-size 0: nothing is recorded
            return JSONResponse(encoder.encode(JournalDocument(requests=[], dropped=0)))
        journal = self.journal.copy()  # as it is now: the loop records on meanwhile

        def read() -> bytes:  # off the loop: a full journal took it for 0.24 s
            entries = journal.entries(
                method=filters["method"].upper() if "method" in filters else None,
                path=filters.get("path"),
                status=status,
                request_id=filters.get("requestId"),
                limit=limit,
            )
            return encoder.encode(JournalDocument(requests=entries, dropped=journal.dropped))

        return JSONResponse(await asyncio.to_thread(read))

    async def clear_requests(self, scope: Scope, receive: Receive) -> Response:
        if self.journal is not None:
            self.journal.clear()
        return NoContent()

    async def list_faults(self, scope: Scope, receive: Receive) -> Response:
        return JSONResponse(encoder.encode(self.faults.rules))

    async def add_fault(self, scope: Scope, receive: Receive) -> Response:
        require_json(scope)
        rule = decode_fault_rule(await read_body(scope, receive, _RULE_BODY_LIMIT))
        check_rule(rule)  # before the protocol's check: a rule that is wrong is told so first
        if rule.drop is True and CLOSE_EXTENSION not in (scope.get("extensions") or {}):
            raise invalid(
                "`drop` needs the service's own HTTP protocol: run `python app.py`, or "
                "`uvicorn app:app` with its --http left as it is or `--http app:StallGuard`"
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
        return JSONResponse(self.document(scope))


# What faults.check_rule checks, said in JSON Schema (schemathesis holds the two to each other):
# one of status, delayMs or drop: true; not status with drop: true; retryAfter only with 429/503.
_DROP: Final = {"required": ["drop"], "properties": {"drop": {"const": True}}}
_RULE_COMBINATIONS: Final = [
    {"anyOf": [{"required": ["status"]}, {"required": ["delayMs"]}, _DROP]},
    {"not": {"allOf": [{"required": ["status"]}, _DROP]}},
    {
        "if": {"required": ["retryAfter"]},
        "then": {
            "required": ["status"],
            "properties": {"status": {"enum": list(RETRY_AFTER_STATUSES)}},
        },
    },
]


def admin_openapi_document(root_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 description of the test-control plane under /_admin."""
    (new_rule_ref, rule_ref, journal_ref, reset_ref, _), schemas = components(
        NewFaultRule, FaultRule, JournalDocument, ResetDone, Error
    )
    schemas["NewFaultRule"]["allOf"] = _RULE_COMBINATIONS
    unauthorized = unauthorized_response("admin key")
    internal = internal_response()
    done = {"description": "Done"}

    def operation(operation_id: str, summary: str, responses: dict[str, Any]) -> dict[str, Any]:
        return {
            "operationId": operation_id,
            "summary": summary,
            "description": summary,
            "tags": ["control"],
            "responses": {**responses, "401": unauthorized, "500": internal},
        }

    def query_parameter(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "description": description,
            "schema": schema,
        }

    list_requests = operation(
        "listRequests",
        "The journal of requests under /v1, oldest first, with no credential in it",
        {
            "200": {"description": "The journal", "content": json_content(journal_ref)},
            "400": error("A filter holds an invalid value", ErrorCode.VALIDATION_ERROR),
        },
    )
    list_requests["parameters"] = [
        query_parameter("method", "Only requests with this method", {"type": "string"}),
        query_parameter("path", "Only requests for exactly this path", {"type": "string"}),
        query_parameter(
            "status",
            "Only requests answered with this status",
            {"type": "integer", "minimum": 100, "maximum": 599},
        ),
        query_parameter("requestId", "Only the request with this X-Request-Id", {"type": "string"}),
        query_parameter(
            "limit", "Only the N of those that arrived last", {"type": "integer", "minimum": 1}
        ),
    ]
    add_fault = operation(
        "addFault",
        f"Make a fault rule: a status, a delay (up to {DELAY_MAX_MS} ms) or a dropped "
        "connection, for one operation or all",
        {
            "201": {
                "description": "The rule in force, with its id",
                "headers": {"Location": {**string_header("Path of the rule"), "required": True}},
                "content": json_content(rule_ref),
            },
            "400": error(
                "The body is not JSON, or not a fault rule",
                ErrorCode.MALFORMED_JSON,
                ErrorCode.VALIDATION_ERROR,
            ),
            "413": error("The body is over the size limit", ErrorCode.PAYLOAD_TOO_LARGE),
            "415": not_json_response(),
        },
    )
    add_fault["requestBody"] = {"required": True, "content": json_content(new_rule_ref)}
    remove_fault = operation(
        "removeFault",
        "Remove one fault rule",
        {"204": done, "404": error("No fault rule has this id", ErrorCode.NOT_FOUND)},
    )
    remove_fault["parameters"] = [
        {
            "name": "ruleId",
            "in": "path",
            "required": True,
            "description": "Id of the rule",
            "schema": {"type": "integer", "minimum": 1},
        }
    ]
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Petstore test-control plane",
            "version": "1.0.0",
            "description": "Reset, the request journal and fault rules, for integration tests. "
            "There only when the service is started with an admin key.",
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": [{"url": f"{root_path}{ADMIN_PREFIX}"}],
        "tags": [{"name": "control", "description": "The test-control plane"}],
        "security": [{"adminAuth": []}],
        "paths": {
            "/reset": {
                "post": operation(
                    "reset",
                    "Put the in-memory store back to its state right after start (the seed, "
                    "ids included) and empty the journal, the fault rules and the idempotency "
                    "keys",
                    {
                        "200": {"description": "Pets now", "content": json_content(reset_ref)},
                        "409": error(
                            "The store keeps its pets in a file or a database",
                            ErrorCode.RESET_UNAVAILABLE,
                        ),
                    },
                )
            },
            "/requests": {
                "get": list_requests,
                "delete": operation("clearRequests", "Empty the journal", {"204": done}),
            },
            "/faults": {
                "get": operation(
                    "listFaults",
                    "The fault rules in force, in creation order",
                    {
                        "200": {
                            "description": "The rules",
                            "content": json_content({"type": "array", "items": rule_ref}),
                        }
                    },
                ),
                "post": add_fault,
                "delete": operation("clearFaults", "Remove every fault rule", {"204": done}),
            },
            "/faults/{ruleId}": {"delete": remove_fault},
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "adminAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Authorization: Bearer <admin key>",
                }
            },
            "headers": {
                "WWW-Authenticate": {**string_header("RFC 6750 challenge"), "required": True}
            },
        },
    }
    return with_request_ids(document)
