"""The small HTTP toolkit: JSON responses and refusals, one Endpoint per path, an indexed router."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence, Sized
from typing import Any, Final, NamedTuple, Protocol, TypeVar

from starlette.responses import Response
from starlette.routing import Route, Router
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketClose

from idempotency import IdempotencyConflict, IdempotencyKeyReused
from schemas import Error, ErrorCode, encoder
from store import StorageUnavailable

logger = logging.getLogger("petstore")

RawHeaders = Sequence[tuple[bytes, bytes]]
_JSON_CONTENT_TYPE: Final = (b"content-type", b"application/json")
# Scope keys (ASGI allows extension keys): the status a response notes once it starts, the
# request's id as the header every response carries, (b"x-request-id", id) (accesslog.AccessLog
# sets it), the chunks of the body as parsing.read_body read them (for the journal), the
# request's Prefer headers joined (for the faults), and the value of its first X-Request-Id
# header as sent, None if it sent none. The last two are found by the server as it parses the
# head (protocol.StallGuard); SENT_REQUEST_ID absent, AccessLog looks through the headers.
STATUS: Final = "petstore.status"
REQUEST_ID_HEADER: Final = "petstore.request_id_header"
BODY: Final = "petstore.body"
PREFER: Final = "petstore.prefer"
SENT_REQUEST_ID: Final = "petstore.sent_request_id"


def note_request_header(scope: Scope, name: bytes, value: bytes) -> None:
    """Note a request's header the service reads of every request, as the server parses it
    (protocol.StallGuard) or AccessLog finds it: every Prefer, joined (several are one list,
    RFC 7240 2), and the first X-Request-Id."""
    if name == b"prefer":
        prefer = scope.get(PREFER)
        scope[PREFER] = value if prefer is None else b"%s,%s" % (prefer, value)
    elif scope.get(SENT_REQUEST_ID) is None:
        scope[SENT_REQUEST_ID] = value


class BytesResponse(Response):
    """A response whose body is ready bytes: every response this service sends.

    Its header list is built here directly (a third of the cost of Starlette's general-purpose
    __init__), and it notes its status in the scope for the access log, which is how the log
    learns it without wrapping `send` (two awaits more a request).
    """

    def __init__(self, body: bytes, content_type: str, headers: RawHeaders = ()) -> None:
        self.body = body
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-length", b"%d" % len(body)),
            (b"content-type", content_type.encode()),
            *headers,
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[STATUS] = self.status_code
        try:  # noqa: SIM105 - contextlib.suppress is a context manager each request
            # Added to the response's own list (each response is made for one request and
            # sent once), not to a copy of it: a list less a request. A try costs nothing
            # when it doesn't raise; scope.get cost a method call.
            self.raw_headers.append(scope[REQUEST_ID_HEADER])
        except KeyError:  # no AccessLog in front: a test's stack of a few layers
            pass
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        await send({"type": "http.response.body", "body": self.body})


class JSONResponse(BytesResponse):
    """JSON bytes (the Error shape, a pet, a page, the documents); its own __init__, not the
    base's with a content type: a call less every response."""

    def __init__(self, body: bytes, status_code: int = 200, headers: RawHeaders = ()) -> None:
        self.body = body
        self.status_code = status_code
        self.background = None
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_CONTENT_TYPE, *headers]


class NoContent(BytesResponse):
    """204: done, nothing to say (no body, so no Content-Type or Content-Length either)."""

    def __init__(self) -> None:
        self.body = b""
        self.status_code = 204
        self.background = None
        self.raw_headers = []


def error_response(
    status: int, code: ErrorCode, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    """The Error shape, with `status` equal to the HTTP status."""
    body = encoder.encode(Error(code=code, message=message, status=status))
    raw = [(name.lower().encode(), value.encode()) for name, value in (headers or {}).items()]
    return JSONResponse(body, status, raw)


class Refused(Exception):
    """A request the service turns down: raised anywhere in a handler, answered as Error."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.response = error_response(status, code, message, headers)


class ClientGone(Exception):
    """The client left, or was cut off (StallGuard), before its body ended: no answer can
    reach it."""


class Unanswered(Response):
    """What a request gets when no answer can reach its client: nothing (its connection is
    closed: a fault's `drop`, a client gone mid-body). Its status is None: the access log
    writes `-` (JSON null), the journal null, the metrics `dropped`."""

    def __init__(self) -> None:
        self.raw_headers = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[STATUS] = None


def invalid(message: str) -> Refused:
    """A 400 `validation_error`: a parameter or header holds a value the contract refuses."""
    return Refused(400, ErrorCode.VALIDATION_ERROR, message)


def internal_error(scope: Scope) -> Response:
    """Log the exception being handled, traceback and all; answer a 500 that tells nothing."""
    logger.exception("unexpected error in %s %s", scope["method"], scope["path"])
    return error_response(500, ErrorCode.INTERNAL_ERROR, "Internal error; the log has details")


def header(scope: Scope, name: bytes) -> str | None:
    """The first header of this lower-case name, as Starlette's Headers.get would give it."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def cut_off(scope: Scope) -> Response:
    """The answer to a request the shutdown cut off: its grace ran out. A create may have been
    stored all the same (its commit under way, as over a database that stopped answering).
    An Endpoint answers it with its path's headers (getPet's Deprecation, within Cors);
    AccessLog, a request cut off before one."""
    if scope["method"] != "POST":
        advice = "it may be retried"
    elif header(scope, b"idempotency-key") is not None:
        advice = "it may have been carried out: retry it with its Idempotency-Key"
    else:
        advice = "it may have been carried out: look for its result before sending it again"
    return error_response(
        500,
        ErrorCode.INTERNAL_ERROR,
        f"The service stopped before this request was answered; {advice}",
        {"Connection": "close"},
    )


# A handler gets the ASGI scope and receive: building a Starlette Request was 3 % of a getPet's
# instructions (bench/instructions.py), and its Headers object more of a createPet's.
Handler = Callable[[Scope, Receive], Awaitable[Response]]


_Made = TypeVar("_Made")


def per_root_path(make: Callable[[str], _Made]) -> Callable[[Scope], _Made]:
    """What `make` gives for a request's root path (set by --root-path or by the server), made
    once for each: there is one, or a very few."""
    made: dict[str, _Made] = {}

    def for_scope(scope: Scope) -> _Made:
        root_path: str = scope.get("root_path", "")
        found = made.get(root_path)
        if found is None:
            found = made[root_path] = make(root_path)
        return found

    return for_scope


class Interception(NamedTuple):
    """What an interceptor decided for a request: the response to send instead of the
    handler's (None: the handler answers), and headers to add to whatever is sent."""

    response: Response | None
    headers: RawHeaders = ()


class Interceptor(Protocol):
    """Looks at a request for an operation (named by the endpoint's map of method to operation)
    after the credential check and before its handler: the test-control plane's faults."""

    @property
    def rules(self) -> Sized:
        """Empty: nothing to do for a request without a Prefer header (the endpoint then skips
        the call: 700 instructions a getPet, with the plane on)."""

    def intercept(
        self, scope: Scope, receive: Receive, operations: Mapping[str, str]
    ) -> Awaitable[Interception] | None:
        """None: nothing to do (decided without an await, as for most requests); else what to
        await for the Interception (which may wait first)."""


_IN_FLIGHT: Final = "The first create with this Idempotency-Key is still in flight; retry later"
_REUSED: Final = "This Idempotency-Key was used with a different request"


class Endpoint:
    """The ASGI app of one path: picks the handler by method and turns whatever it returns or
    raises into the response (Refused: its Error; a store's StorageUnavailable: 503
    storage_unavailable; an Idempotency-Key in flight or reused: 409 or 422; a cut-off by the
    shutdown: cut_off's 500; anything else: a logged 500), adding the
    path's own headers to every one of them. `{root_path}` in a header value is the request's
    root path (set by --root-path or by the server), so links keep the proxy's prefix.
    `operations` names the operation of each method, for the interceptor, if there is one.
    `holds` maps a method to what is called first for its requests, and gives what to call
    once the response is made, or None: createPet's Idempotency-Key held until answered."""

    def __init__(
        self,
        handlers: Mapping[str, Handler],
        headers: Mapping[str, str] | None = None,
        *,
        operations: Mapping[str, str] | None = None,
        interceptor: Interceptor | None = None,
        holds: Mapping[str, Callable[[Scope], Callable[[], None] | None]] | None = None,
    ) -> None:
        self.handlers = dict(handlers)
        self.holds = dict(holds or {})
        self.operations = dict(operations or {})
        if "GET" in self.handlers:
            self.handlers.setdefault("HEAD", self.handlers["GET"])
            if "GET" in self.operations:
                self.operations.setdefault("HEAD", self.operations["GET"])
        self.allow = ", ".join(sorted(self.handlers))
        self.header_templates = dict(headers or {})
        self.headers_for = per_root_path(self._headers)
        self.interceptor = interceptor if self.operations else None

    def _headers(self, root_path: str) -> RawHeaders:
        return [
            (name.lower().encode(), value.format(root_path=root_path).encode())
            for name, value in self.header_templates.items()
        ]

    # One function, each outcome a branch: a helper would be a call more for every request.
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # noqa: PLR0912
        handler = self.handlers.get(scope["method"])
        added: RawHeaders = ()
        release = None
        try:
            if handler is None:
                raise Refused(
                    405,
                    ErrorCode.METHOD_NOT_ALLOWED,
                    f"Method {scope['method']} is not allowed here; allowed: {self.allow}",
                    {"Allow": self.allow},
                )
            if self.holds and (hold := self.holds.get(scope["method"])) is not None:
                release = hold(scope)
            if (
                (interceptor := self.interceptor) is not None
                and (PREFER in scope or interceptor.rules)
                and (pending := interceptor.intercept(scope, receive, self.operations))
            ):
                interception = await pending
                added = interception.headers
                response = interception.response or await handler(scope, receive)
            else:
                response = await handler(scope, receive)
        except Refused as refusal:
            response = refusal.response
        except ClientGone:
            response = Unanswered()
        except StorageUnavailable as error:  # from any store, on any operation
            response = error_response(503, ErrorCode.STORAGE_UNAVAILABLE, str(error))
        except IdempotencyConflict:  # createPet's key, held (KeysInFlight) or being stored
            response = error_response(409, ErrorCode.IDEMPOTENCY_CONFLICT, _IN_FLIGHT)
        except IdempotencyKeyReused:
            response = error_response(422, ErrorCode.IDEMPOTENCY_KEY_REUSED, _REUSED)
        except Exception:
            response = internal_error(scope)
        except asyncio.CancelledError:  # the shutdown's grace ran out: answered, with our headers
            response = cut_off(scope)
        finally:
            if release is not None:
                release()
        if added:
            response.raw_headers += added
        if self.header_templates:
            response.raw_headers += self.headers_for(scope)
        await response(scope, receive, send)


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """Any path no route takes; and any WebSocket, which the service does not speak: closed
    before it is accepted, which the server answers with a 403. (`python app.py` runs uvicorn
    without WebSocket, so there an Upgrade is ignored and the request answered as HTTP.)"""
    if scope["type"] == "websocket":
        await WebSocketClose()(scope, receive, send)
        return
    response = error_response(404, ErrorCode.NOT_FOUND, "No resource at this path")
    await response(scope, receive, send)


class IndexedRouter(Router):
    """Starlette's Router with an index in front: a path is found by one or two dict lookups
    instead of Router.app's loop over every route's regex (the profile's biggest item after
    uvicorn). A route without parameters is indexed by its path, and one whose only parameter
    is its last segment (/v1/pets/{petId}) by the path before that segment; the index takes
    no other kind. Everything else (lifespan, and the 404 of an unknown path) is Starlette's.
    """

    def __init__(self, routes: Sequence[Route], **kwargs: Any) -> None:
        super().__init__(routes, redirect_slashes=False, default=not_found, **kwargs)
        self.static: dict[str, Route] = {}
        self.by_parent: dict[str, tuple[Route, str]] = {}
        for route in routes:
            parent, _, last = route.path.rpartition("/")
            name = last[1:-1]
            if not route.param_convertors:
                self.static[route.path] = route
            elif last == f"{{{name}}}" and list(route.param_convertors) == [name]:
                self.by_parent[parent] = (route, name)  # a plain {name}: any text but "/"
            else:
                raise ValueError(f"IndexedRouter can't index {route.path}")

    def lookup(self, path: str) -> tuple[Route, dict[str, Any]] | None:
        """The route that takes this path, and its path parameters."""
        if (route := self.static.get(path)) is not None:
            return route, {}
        parent, _, last = path.rpartition("/")
        if last and (found := self.by_parent.get(parent)):
            return found[0], {found[1]: last}
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (found := self.lookup(route_path(scope))):
            scope["route"], scope["path_params"] = found
            await found[0].app(scope, receive, send)  # methods=None: the Endpoint checks them
            return
        await self.app(scope, receive, send)

    def template(self, scope: Scope) -> str | None:
        """The template of the route that takes this request's path (for a request refused
        before routing), None when none does."""
        found = self.lookup(route_path(scope))
        return found[0].path if found else None

    def route_headers(self, scope: Scope) -> RawHeaders:
        """Route a request refused before routing (a 401) as routing would, its route left in
        the scope (the metrics' label: looked up again, it cost as much again), and give the
        headers its endpoint adds to its responses."""
        found = self.lookup(route_path(scope))
        if found is None:
            return []
        route = scope["route"] = found[0]
        endpoint = route.endpoint
        return endpoint.headers_for(scope) if isinstance(endpoint, Endpoint) else []


def route_path(scope: Scope) -> str:
    """The request's path without the root path: what the routes are written against."""
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    return path[len(root_path) :] if root_path and path.startswith(root_path) else path
