"""Pure ASGI middleware: the root path, bearer auth, CORS (the access log: accesslog.py)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from routing import BytesResponse, JSONResponse, RawHeaders, error_response, route_path
from schemas import ErrorCode


class RootPath:
    """Serve behind a proxy that strips a prefix: the prefix goes into every link we write.

    uvicorn's own --root-path does the same; this one reads PETSTORE_ROOT_PATH / --root-path and
    stays out of the way when the server already set one. The server's scope is changed, not
    copied (it is the request's own): head.QuickHead reads the request id AccessLog puts in it.
    """

    def __init__(self, app: ASGIApp, root_path: str) -> None:
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not scope.get("root_path"):
            scope["root_path"], scope["path"] = self.root_path, self.root_path + scope["path"]
        await self.app(scope, receive, send)


# Why a request gets its 401: no credential; one of another scheme (or `Bearer` with no
# token); a bearer token that is not one of the keys.
Refusal = Literal["missing", "not_bearer", "not_accepted"]


@dataclass(frozen=True)
class Area:
    """The paths one set of keys guards: those under `prefix` but the public ones."""

    prefix: str
    realm: str  # of the WWW-Authenticate challenge
    key_name: str  # as the 401's message names it
    public_paths: frozenset[str]


class Credentials:
    """One set of keys and the paths it guards: those under the area's prefix but its public
    ones. Keys are compared as SHA-256 digests with hmac.compare_digest, every key every time.
    The 401 carries the headers the path's endpoint would have added (getPet's deprecation)."""

    def __init__(
        self,
        keys: Sequence[str],
        area: Area,
        headers_for: Callable[[Scope], RawHeaders] = lambda scope: (),
    ) -> None:
        self.digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        self.public_paths = area.public_paths
        self.headers_for = headers_for
        # The paths under the prefix are those from prefix + "/" up to (not including) prefix
        # + "0", "0" being the character after "/": two comparisons of strings where
        # str.startswith, whose arguments are parsed as a tuple, costs 1k instructions.
        self.prefix, self.under_prefix = area.prefix, area.prefix + "/"
        self.past_prefix = area.prefix + "0"
        key_name = area.key_name
        challenge = f'Bearer realm="{area.realm}"'
        # Built once (the 401 is a hot path too), by what was sent: nothing, a credential of
        # another scheme (or `Bearer` with no token), a bearer token not accepted.
        send = f"send Authorization: Bearer <{key_name}>"
        self.refusals: dict[Refusal, Response] = {
            "missing": error_response(
                401,
                ErrorCode.UNAUTHORIZED,
                f"Missing credential: {send}",
                {"WWW-Authenticate": challenge},
            ),
            "not_bearer": error_response(
                401,
                ErrorCode.UNAUTHORIZED,
                f"Not a bearer token: {send}",
                {"WWW-Authenticate": challenge},
            ),
            "not_accepted": error_response(
                401,
                ErrorCode.UNAUTHORIZED,
                f"The {key_name} is not accepted",
                {"WWW-Authenticate": f'{challenge}, error="invalid_token"'},
            ),
        }

    def accepts(self, token: bytes) -> bool:
        digest = hashlib.sha256(token).digest()
        accepted = False
        for known in self.digests:
            accepted |= hmac.compare_digest(digest, known)
        return accepted

    def guards(self, path: str) -> bool:
        """Whether a request for this path (the root path taken off) needs a key of this set."""
        return (self.under_prefix <= path < self.past_prefix or path == self.prefix) and (
            path not in self.public_paths
        )

    def refusal(self, scope: Scope, why: Refusal) -> JSONResponse:
        """The 401 for a request without a key of this set, for the reason given."""
        refusal = self.refusals[why]
        response = JSONResponse(bytes(refusal.body), 401)
        response.raw_headers = [*refusal.raw_headers, *self.headers_for(scope)]
        return response


class BearerAuth:
    """Refuse every request under a guarded prefix (/v1 for API keys, /_admin for admin keys)
    without a key of that prefix's set. It runs before routing, so an unauthenticated client
    learns nothing: no 404, no 400."""

    def __init__(self, app: ASGIApp, credentials: Sequence[Credentials]) -> None:
        self.app = app
        self.credentials = tuple(credentials)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = route_path(scope)
            for credentials in self.credentials:
                if credentials.guards(path):
                    # Inline, not a method of Credentials: this runs for every request.
                    authorization = b""
                    for name, value in scope["headers"]:
                        if name == b"authorization":
                            authorization = value
                            break
                    scheme, _, token = authorization.partition(b" ")
                    token = token.strip(b" \t")
                    is_bearer = scheme.lower() == b"bearer" and bool(token)
                    if not (is_bearer and credentials.accepts(token)):
                        why: Refusal = (
                            "not_accepted"
                            if is_bearer
                            else ("not_bearer" if authorization else "missing")
                        )
                        await credentials.refusal(scope, why)(scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)


# What a browser app may send and read (CONTRACT.md, Browsers and generated clients).
CORS_REQUEST_HEADERS: Final = (
    "Authorization",
    "Content-Type",
    "Idempotency-Key",
    "Prefer",
    "X-Request-Id",
)
CORS_EXPOSED_HEADERS: Final = (
    "Location",
    "Link",
    "Deprecation",
    "Sunset",
    "WWW-Authenticate",
    "Retry-After",
    "X-Request-Id",
    "Idempotent-Replayed",
    "Preference-Applied",
)


class Cors(CORSMiddleware):
    """Starlette's CORS for the configured origins, with its preflight answers made ours.

    It sits outside BearerAuth, so that a preflight (which carries no credential) is answered
    before the credential check. Starlette answers one with a plain Response (a refusal in plain
    text): ours carry the request's X-Request-Id, and a refusal is an Error body.
    """

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        super().__init__(
            app,
            allow_origins=origins,
            # DELETE: a test harness in a browser clears the plane's journal and rules.
            allow_methods=("GET", "HEAD", "POST", "DELETE"),
            allow_headers=CORS_REQUEST_HEADERS,
            expose_headers=CORS_EXPOSED_HEADERS,
            # A page of a configured origin may reach this service on a private address (the
            # dev server on localhost): Chrome's Private Network Access asks first.
            allow_private_network=True,
        )

    def preflight_response(self, request_headers: Headers) -> Response:
        asked = request_headers.getlist("access-control-request-headers")
        if asked and not "".join(asked).strip():
            # No header asked for (Fetch: an empty list), which Starlette read as one named "".
            kept = [h for h in request_headers.raw if h[0] != b"access-control-request-headers"]
            request_headers = Headers(raw=kept)
        response = super().preflight_response(request_headers)
        headers = {
            name: value
            for name, value in response.headers.items()
            if name not in ("content-type", "content-length")
        }
        if response.status_code == 200:  # Starlette's "OK", as one of ours: it carries the id
            raw = [(name.encode(), value.encode()) for name, value in headers.items()]
            return BytesResponse(bytes(response.body), response.headers["content-type"], raw)
        return error_response(
            response.status_code,
            ErrorCode.VALIDATION_ERROR,
            f"{self._refused(request_headers) or bytes(response.body).decode()}: this preflight"
            " is refused",
            headers,
        )

    def _refused(self, request_headers: Headers) -> str:
        """What Starlette's refusal ("Disallowed CORS origin, method") refused, named: the
        origin, the method, the request headers not allowed ("" if none of them)."""
        origin = request_headers.get("origin", "")
        method = request_headers.get("access-control-request-method", "")
        asked = request_headers.get("access-control-request-headers")
        refused = []
        if not self.is_allowed_origin(origin):
            refused.append(f"origin {origin!r}")
        if method not in self.allow_methods:
            refused.append(f"method {method!r}")
        if asked is not None:
            names = [name.strip() for name in asked.split(",")]
            others = [name for name in names if name.lower() not in self.allow_headers]
            if others:
                refused.append(f"headers {', '.join(map(repr, others))}")
        return f"Disallowed CORS {', '.join(refused)}" if refused else ""
