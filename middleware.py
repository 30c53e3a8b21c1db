"""Pure ASGI middleware: request ids, the access log, metrics and journal; bearer auth; CORS."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from logging import INFO
from typing import Final

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import schemas
from observability import Metrics, key_digest, redact
from schemas import API_PREFIX, JOURNAL_BODY_LIMIT, ErrorCode, encoder, error_response, rfc3339
from settings import Settings
from testplane import ADDED_HEADERS, STATUS, Tenant

logger = logging.getLogger("petstore")
access_logger = logging.getLogger("petstore.access")

TENANT: Final = "petstore.tenant"  # scope key: the Tenant a request acts on
# Seconds the access log's requests gather before their lines are made and handed on: short,
# as making them holds up the requests waiting meanwhile.
LOG_EVERY: Final = 0.02
RouteHeaders = Callable[[str], list[tuple[bytes, bytes]]]  # of the root path
# What the access log keeps of a request until the flush makes its line: its clock at arrival,
# duration, client, method, path, status, the id it was sent (or None) and its id.
Ended = tuple[float, float, tuple[str, int] | None, str, str, int | None, str | None, str]


def route_path(scope: Scope) -> str:
    """The request's path without its root path: what routes and areas are written against."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _sent_id(scope: Scope) -> str | None:
    """The client's X-Request-Id when it is 1 to 128 visible ASCII characters."""
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            sent = value.strip(b" \t")  # whitespace around a value is not part of it
            if 0 < len(sent) <= 128 and all(0x21 <= byte <= 0x7E for byte in sent):
                return str(sent.decode("ascii"))
            break
    return None


def over_limit(length: bytes, limit: int) -> bool:
    """Whether a Content-Length declares a body over `limit`: one refused (413) unread."""
    return length.isdigit() and int(length) > limit


class KeptBody:
    """What a create under /v1 sends, as the journal keeps it: the start of its body, read as
    the handler reads it, or, for a create refused unread, read before the answer goes."""

    def __init__(self, scope: Scope, receive: Receive, max_body: int) -> None:
        self.scope, self.upstream, self.max_body = scope, receive, max_body
        self.body: bytearray | None = None  # None: no part of the body was read

    async def receive(self) -> Message:
        message = await self.upstream()
        self.body = self.body if self.body is not None else bytearray()
        if len(self.body) < (kept := self.scope[TENANT].journal.body_kept):
            self.body.extend(message.get("body", b"")[: kept - len(self.body)])
        return message

    async def rest(self) -> None:
        """Read the body a refused create left unread, unless its client waits for the answer
        to send it (a 100 Continue, or a Content-Length a 413 refuses unread)."""
        headers = dict(self.scope["headers"])
        length = headers.get(b"content-length", b"")
        waits = headers.get(b"expect", b"").lower() == b"100-continue"
        if self.body is not None or waits or over_limit(length, self.max_body):
            return
        while (message := await self.receive())["type"] == "http.request":
            if not message.get("more_body") or len(self.body or b"") > JOURNAL_BODY_LIMIT:
                break


class Requests:
    """Outermost: gives each request its id, times it, logs it in the access log, counts it,
    records /v1 requests in their tenant's journal, and answers anything unexpected with 500."""

    def __init__(
        self,
        app: ASGIApp,
        settings: Settings,
        metrics: Metrics | None,
        route_headers: Mapping[str, RouteHeaders],
    ) -> None:
        self.app, self.metrics, self.route_headers = app, metrics, route_headers
        self.root_path, self.secrets = settings.root_path, settings.secrets
        self.json_lines = settings.log_format == "json"
        self.journaling = bool(settings.admin_keys and settings.journal_size)
        self.max_body = settings.max_body
        self.ended: list[Ended] = []  # requests whose access-log lines are not made yet
        self.prefix, self.ids = secrets.token_hex(4), itertools.count(1)  # a made id's parts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        clock = time.perf_counter()
        if self.root_path and not scope.get("root_path"):
            scope["root_path"], scope["path"] = self.root_path, self.root_path + scope["path"]
        sent = _sent_id(scope)
        request_id = sent or f"{self.prefix}-{next(self.ids)}"
        journaled = self.journaling and _under(route_path(scope), API_PREFIX)
        # The journal orders requests by their arrival: on the wall clock, read as they arrive.
        arrived = time.time() if journaled else 0.0
        journal_body = journaled and scope["method"] == "POST"
        kept = KeptBody(scope, receive, self.max_body) if journal_body else None
        status: int | None = None  # the answer's, once it starts

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                if kept is not None and message["status"] != 401:
                    await kept.rest()
                status = message["status"]
                headers = message.setdefault("headers", [])
                headers.append((b"x-request-id", request_id.encode()))
                headers.extend(scope.get(ADDED_HEADERS, ()))
                route = scope.get("route")
                if route is not None and (more := self.route_headers.get(route.path)):
                    headers.extend(more(scope.get("root_path", "")))
            await send(message)

        try:
            await self.app(scope, kept.receive if kept else receive, send_with_id)
        except (Exception, asyncio.CancelledError) as error:
            cut = isinstance(error, asyncio.CancelledError)  # the shutdown's grace ran out
            if not cut:
                logger.exception("unexpected error in %s %s", scope["method"], scope["path"])
            if status is None:
                message = (
                    "The service stopped before this request was answered"
                    if cut
                    else "Internal error; the log has details"
                )
                response = error_response(500, ErrorCode.INTERNAL_ERROR, message)
                await response(scope, receive, send_with_id)
            if cut:
                raise
        duration = time.perf_counter() - clock
        final = None if STATUS in scope else status
        if access_logger.isEnabledFor(INFO):  # its line is made at the flush, with the others
            if not self.ended:
                asyncio.get_running_loop().call_later(LOG_EVERY, self.flush)
            client, method, path = scope.get("client"), scope["method"], scope["path"]
            self.ended.append((clock, duration, client, method, path, final, sent, request_id))
        if self.metrics is not None:
            route = scope.get("route")
            self.metrics.observe(scope["method"], route.path if route else "other", final, duration)
        if journaled and (journal := scope[TENANT].journal) is not None:
            body = None if kept is None or kept.body is None else bytes(kept.body)
            journal.record(scope, final, arrived, duration, request_id, body)

    def _line(self, ended: Ended, to_wall: float) -> str:
        clock, duration, client, method, path, status, sent, request_id = ended
        path = redact(path, self.secrets)
        request_id = redact(sent, self.secrets) if sent else request_id  # a made one has none
        if self.json_lines:
            return encoder.encode(
                {
                    "time": rfc3339(clock + to_wall),
                    "client": client[0] if client else None,
                    "method": method,
                    "path": path,
                    "status": status,
                    "durationUs": int(duration * 1e6),
                    "requestId": request_id,
                }
            ).decode()
        if not path.isprintable() or '"' in path:  # a client can't write a line of its own
            path = path.encode("unicode_escape").decode().replace('"', '\\"')
        shown = "-" if status is None else status
        return (
            f'{client[0] if client else "-"} "{method} {path}" {shown}'
            f" {int(duration * 1e6)}us {request_id}"
        )

    def flush(self) -> None:
        """Make the lines of the requests ended so far, in one loop (cheaper than one at a time),
        and hand them to the access logger as one record (a record each would cost more)."""
        if self.ended:
            ended, self.ended = self.ended, []
            to_wall = time.time() - time.perf_counter()  # from a request's clock to the wall's
            text = "\n".join([self._line(entry, to_wall) for entry in ended])
            # Made and handled directly: logger.info would look up its caller's frame.
            record = access_logger.makeRecord(access_logger.name, INFO, "", 0, text, (), None)
            access_logger.handle(record)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


class Area:
    """The paths one kind of key opens (those under `prefix` but its document) and its 401s."""

    def __init__(self, prefix: str, public: str, realm: str, key_name: str) -> None:
        self.prefix, self.public = prefix, public
        send = f"send Authorization: Bearer <{key_name}>"
        challenge = f'Bearer realm="{realm}"'
        self.missing = _refusal(f"Missing credential: {send}", challenge)
        self.not_bearer = _refusal(f"Not a bearer token: {send}", challenge)
        wrong = f"The {key_name} is not accepted"
        self.wrong = _refusal(wrong, f'{challenge}, error="invalid_token"')


def _refusal(message: str, challenge: str) -> Response:
    return error_response(401, ErrorCode.UNAUTHORIZED, message, {"WWW-Authenticate": challenge})


API_AREA: Final = Area(API_PREFIX, schemas.OPENAPI_PATH, schemas.BEARER_REALM, "API key")
ADMIN_AREA: Final = Area(
    schemas.ADMIN_PREFIX, schemas.ADMIN_OPENAPI_PATH, schemas.ADMIN_REALM, "admin key"
)


class BearerAuth:
    """Refuses a request under /v1 (or, with the plane, /_admin) without that area's key, before
    routing; puts the key's tenant in the scope (`tenants` is by `key_digest`); answers the
    routes' ApiErrors in the Error shape."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tenants: dict[bytes, Tenant],
        default: Tenant,
        admin_keys: Sequence[str],
        routes: Sequence[BaseRoute],
    ) -> None:
        self.app, self.tenants, self.default, self.routes = app, tenants, default, routes
        self.admin = {key_digest(key.encode()) for key in admin_keys}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = route_path(scope)
            if _under(path, API_PREFIX):
                scope[TENANT] = self.default  # the public document's, and the refused requests'
                if path != API_AREA.public:
                    digest = self._digest(scope)
                    if (tenant := self.tenants.get(digest) if digest else None) is None:
                        await self._refuse(scope, receive, send, API_AREA, digest)
                        return
                    scope[TENANT] = tenant
                    if tenant.id:  # a minted tenant: its idleness is watched
                        tenant.used = time.time()
            elif self.admin and _under(path, ADMIN_AREA.prefix) and path != ADMIN_AREA.public:
                digest = self._digest(scope)
                if digest not in self.admin:
                    await self._refuse(scope, receive, send, ADMIN_AREA, digest)
                    return
        try:
            await self.app(scope, receive, send)
        except schemas.ApiError as error:
            await error.response()(scope, receive, send)
        except ClientDisconnect:
            scope[STATUS] = None  # nobody to answer

    @staticmethod
    def _digest(scope: Scope) -> bytes | None:
        """The bearer token's digest; b"" for a credential of another scheme; None for none."""
        for name, value in scope["headers"]:
            if name == b"authorization" and value.strip():
                scheme, _, token = value.partition(b" ")
                token = token.strip(b" \t")
                return key_digest(token) if scheme.lower() == b"bearer" and token else b""
        return None

    async def _refuse(
        self, scope: Scope, receive: Receive, send: Send, area: Area, digest: bytes | None
    ) -> None:
        for route in self.routes:  # the route it would have taken: its metrics, its headers
            if route.matches(scope)[0] is not Match.NONE:
                scope["route"] = route
                break
        answer = area.missing if digest is None else area.not_bearer if not digest else area.wrong
        # Made once: each gets its own list of the headers, which the layers around add to.
        await send({"type": "http.response.start", "status": 401, "headers": [*answer.raw_headers]})
        await send({"type": "http.response.body", "body": answer.body})


# What a browser app may send and read.
CORS_REQUEST_HEADERS: Final = "Authorization Content-Type Idempotency-Key Prefer X-Request-Id"
CORS_EXPOSED_HEADERS: Final = (
    "Location Link Deprecation Sunset WWW-Authenticate Retry-After X-Request-Id"
    " Idempotent-Replayed Preference-Applied"
)


class Cors(CORSMiddleware):
    """Starlette's CORS for the configured origins, outside the auth so that a preflight is
    answered first; a refused preflight gets the Error shape rather than plain text."""

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        super().__init__(
            app,
            allow_origins=origins,
            allow_methods=("GET", "HEAD", "POST", "DELETE"),
            allow_headers=CORS_REQUEST_HEADERS.split(),
            expose_headers=CORS_EXPOSED_HEADERS.split(),
        )

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        headers = {k: v for k, v in response.headers.items() if not k.startswith("content-")}
        message = f"{bytes(response.body).decode()}: this preflight is refused"
        return error_response(response.status_code, ErrorCode.VALIDATION_ERROR, message, headers)
