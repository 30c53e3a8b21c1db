"""HTTP for the petstore: settings, middleware, routes, error mapping, and the command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import hmac
import logging
import multiprocessing
import os
import re
import secrets
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TextIO

import msgspec
import uvicorn
from starlette.responses import Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import LOG_LEVELS, STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from schemas import (
    BEARER_REALM,
    DEPRECATION,
    INT64_MAX,
    INT64_MIN,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    LIMIT_MIN,
    SUCCESSOR_PATH,
    SUNSET,
    Error,
    ErrorCode,
    NewPet,
    PetStatus,
    SeedPet,
    encoder,
    new_pet_decoder,
    openapi_document,
    seed_decoder,
)
from store import (
    DataFileError,
    FileStore,
    MemoryStore,
    PetStore,
    StorageUnavailable,
    seed_pets,
)

logger = logging.getLogger("petstore")

# --------------------------------------------------------------------------- settings

# RFC 6750 b64token: what a bearer credential can carry.
_BEARER_TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class SettingsError(Exception):
    """A setting that stops the start; its text is the one line the user sees."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, read once from flags and the environment (flags win)."""

    host: str = "127.0.0.1"
    port: int = 8000
    data: str | None = None
    seed: str | None = None
    api_keys: tuple[str, ...] = ()
    max_body: int = 1024 * 1024
    root_path: str = ""
    log_level: str = "info"
    client_timeout: float = 10.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2 itself
        raise SettingsError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="app.py", description="Serve the petstore HTTP/JSON interface.")
    parser.add_argument("--host", help="address to listen on (PETSTORE_HOST)")
    parser.add_argument("--port", help="port to listen on (PETSTORE_PORT)")
    parser.add_argument("--data", metavar="FILE", help="keep pets in this file (PETSTORE_DATA)")
    parser.add_argument("--seed", metavar="FILE", help="JSON array of pets to start with")
    parser.add_argument(
        "--api-key", action="append", metavar="KEY", help="accepted key, repeatable"
    )
    parser.add_argument("--api-key-file", metavar="FILE", help="accepted keys, one a line")
    parser.add_argument("--max-body", metavar="BYTES", help="largest request body accepted")
    parser.add_argument("--root-path", metavar="PATH", help="prefix a proxy strips off")
    parser.add_argument("--log-level", metavar="LEVEL", help="|".join(LOG_LEVELS))
    parser.add_argument(
        "--client-timeout", metavar="SECONDS", help="cut off a client stalled this long"
    )
    return parser


def _integer(low: int, high: int) -> Callable[[str, str], int]:
    def parse(text: str, name: str) -> int:
        if not re.fullmatch(r"[0-9]+", text) or not low <= int(text) <= high:
            raise SettingsError(f"{name}: expected an integer from {low} to {high}, got {text!r}")
        return int(text)

    return parse


def _text(text: str, name: str) -> str:
    return text


def _optional_path(text: str, name: str) -> str | None:
    return text or None


def _root_path(text: str, name: str) -> str:
    if text and not re.fullmatch(r"(/[A-Za-z0-9\-._~%!$&'()*+,;=:@]+)+", text):
        raise SettingsError(f"{name}: expected a path like /api (no trailing /), got {text!r}")
    return text


def _log_level(text: str, name: str) -> str:
    if text.lower() not in LOG_LEVELS:
        raise SettingsError(f"{name}: expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.lower()


def _seconds(text: str, name: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 3600:
        raise SettingsError(f"{name}: expected seconds in (0, 3600], got {text!r}")
    return seconds


# Settings field, environment variable, parser. The flag is the field's name in kebab case.
_SOURCES: Final = (
    ("host", "PETSTORE_HOST", _text),
    ("port", "PETSTORE_PORT", _integer(0, 65535)),
    ("data", "PETSTORE_DATA", _optional_path),
    ("seed", "PETSTORE_SEED", _optional_path),
    ("max_body", "PETSTORE_MAX_BODY", _integer(1, 2**40)),
    ("root_path", "PETSTORE_ROOT_PATH", _root_path),
    ("log_level", "PETSTORE_LOG_LEVEL", _log_level),
    ("client_timeout", "PETSTORE_CLIENT_TIMEOUT", _seconds),
)


def _read_key_file(path: str, name: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as file:
            keys = [line.strip() for line in file if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise SettingsError(f"{name}: cannot read {path!r}: {error}") from None
    if not keys:
        raise SettingsError(f"{name}: {path!r} holds no key")
    return keys


def _api_keys(flags: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Keys from --api-key (else PETSTORE_API_KEYS) plus the key file's; checked, never shown."""
    keys: list[tuple[str, str]] = []
    if flags.api_key is not None:
        keys += [(key, "--api-key") for key in flags.api_key]
    elif "PETSTORE_API_KEYS" in environ:
        variable = environ["PETSTORE_API_KEYS"]
        keys += [(key.strip(), "PETSTORE_API_KEYS") for key in variable.split(",")]
    file_source = "--api-key-file" if flags.api_key_file is not None else "PETSTORE_API_KEYS_FILE"
    if path := flags.api_key_file or environ.get("PETSTORE_API_KEYS_FILE"):
        keys += [(key, file_source) for key in _read_key_file(path, file_source)]
    for number, (key, source) in enumerate(keys, 1):
        if not _BEARER_TOKEN.fullmatch(key):
            raise SettingsError(
                f"{source}: key #{number} is empty or holds characters a bearer token can't carry"
            )
    return tuple(dict.fromkeys(key for key, _ in keys))


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Settings from command-line flags, then PETSTORE_* variables, then defaults."""
    flags = _parser().parse_args(argv)
    values: dict[str, Any] = {"api_keys": _api_keys(flags, environ)}
    for field, variable, parse in _SOURCES:
        if (flag := getattr(flags, field)) is not None:
            values[field] = parse(flag, "--" + field.replace("_", "-"))
        elif variable in environ:
            values[field] = parse(environ[variable], variable)
    return Settings(**values)


def with_key(settings: Settings, out: TextIO) -> Settings:
    """Settings with at least one API key; a generated one is printed once, to `out`."""
    if settings.api_keys:
        return settings
    key = secrets.token_urlsafe(32)
    print(f"petstore: no API key configured; this run accepts: Bearer {key}", file=out, flush=True)
    return replace(settings, api_keys=(key,))


# --------------------------------------------------------------------------- responses


RawHeaders = Sequence[tuple[bytes, bytes]]
_JSON_CONTENT_TYPE: Final = (b"content-type", b"application/json")
# The scope key where a response notes its status once it starts (ASGI allows extension keys).
STATUS: Final = "petstore.status"


class JSONResponse(Response):
    """A response whose body is already JSON bytes: every response this service sends.

    Its header list is built here directly (a third of the cost of Starlette's general-purpose
    __init__), and it notes its status in the scope for the access log, which is how the log
    learns it without wrapping `send` (two awaits more a request).
    """

    media_type = "application/json"

    def __init__(self, body: bytes, status_code: int = 200, headers: RawHeaders = ()) -> None:
        self.body = body
        self.status_code = status_code
        self.background = None
        self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_CONTENT_TYPE, *headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[STATUS] = self.status_code
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        await send({"type": "http.response.body", "body": self.body})


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


def _invalid(message: str) -> Refused:
    return Refused(400, ErrorCode.VALIDATION_ERROR, message)


def _internal_error(scope: Scope) -> Response:
    """Log the exception being handled, traceback and all; answer a 500 that tells nothing."""
    logger.exception("unexpected error in %s %s", scope["method"], scope["path"])
    return error_response(500, ErrorCode.INTERNAL_ERROR, "Internal error; the log has details")


# --------------------------------------------------------------------------- routing

# A handler gets the ASGI scope and receive: building a Starlette Request was 3 % of a getPet's
# instructions (bench/instructions.py), and its Headers object more of a createPet's.
Handler = Callable[[Scope, Receive], Awaitable[Response]]


class Endpoint:
    """The ASGI app of one path: picks the handler by method and turns whatever it returns or
    raises into the response (Refused: its Error; anything else: a logged 500), adding the
    path's own headers to every one of them. `{root_path}` in a header value is the request's
    root path (set by --root-path or by the server), so links keep the proxy's prefix."""

    def __init__(
        self, handlers: Mapping[str, Handler], headers: Mapping[str, str] | None = None
    ) -> None:
        self.handlers = dict(handlers)
        if "GET" in self.handlers:
            self.handlers.setdefault("HEAD", self.handlers["GET"])
        self.allow = ", ".join(sorted(self.handlers))
        self.header_templates = dict(headers or {})
        self.headers_by_root_path: dict[str, RawHeaders] = {}

    def headers_for(self, scope: Scope) -> RawHeaders:
        root_path: str = scope.get("root_path", "")
        headers = self.headers_by_root_path.get(root_path)
        if headers is None:  # once per root path: there is one, or a very few
            headers = self.headers_by_root_path[root_path] = [
                (name.lower().encode(), value.format(root_path=root_path).encode())
                for name, value in self.header_templates.items()
            ]
        return headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.handlers.get(scope["method"])
        try:
            if handler is None:
                raise Refused(
                    405,
                    ErrorCode.METHOD_NOT_ALLOWED,
                    f"Method {scope['method']} is not allowed here; allowed: {self.allow}",
                    {"Allow": self.allow},
                )
            response = await handler(scope, receive)
        except Refused as refusal:
            response = refusal.response
        except Exception:
            response = _internal_error(scope)
        if self.header_templates:
            response.raw_headers += self.headers_for(scope)
        await response(scope, receive, send)


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """Any path no route takes."""
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
        if scope["type"] == "http" and (found := self.lookup(_route_path(scope))):
            scope["route"], scope["path_params"] = found
            await found[0].app(scope, receive, send)  # methods=None: the Endpoint checks them
            return
        await self.app(scope, receive, send)

    def headers_for(self, scope: Scope) -> RawHeaders:
        """The headers the endpoint at this path adds to its responses (for a 401 there)."""
        found = self.lookup(_route_path(scope))
        endpoint = found[0].endpoint if found else None
        return endpoint.headers_for(scope) if isinstance(endpoint, Endpoint) else []


# --------------------------------------------------------------------------- middleware


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    return path[len(root_path) :] if root_path and path.startswith(root_path) else path


class RootPath:
    """Serve behind a proxy that strips a prefix: the prefix goes into every link we write.

    uvicorn's own --root-path does the same; this one reads PETSTORE_ROOT_PATH / --root-path and
    stays out of the way when the server already set one.
    """

    def __init__(self, app: ASGIApp, root_path: str) -> None:
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not scope.get("root_path"):
            scope = {**scope, "root_path": self.root_path, "path": self.root_path + scope["path"]}
        await self.app(scope, receive, send)


class AccessLog:
    """One line per request (client, method, path, status, duration in microseconds), never a
    header; no lines at all when `stream` is None (log level warning and above).

    A request costs one tuple appended to a list; `flush()`, which the lifespan calls every half
    second, turns them into lines and writes them in one go. Writing each line as its request
    ended, through a `send` wrapper that caught the status, cost 3 % of a getPet's instructions
    more (bench/instructions.py); stdlib logging costs tens of microseconds. Being the layer
    that sees how each request ended, it also answers the last-resort 500 when one failed
    before any response.
    """

    def __init__(self, app: ASGIApp, stream: TextIO | None) -> None:
        self.app = app
        self.stream = stream
        self.entries: list[tuple[tuple[str, int] | None, str, str, int, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter_ns()
        try:
            await self.app(scope, receive, send)
        except Exception:
            if STATUS in scope:  # too late for an Error body: uvicorn logs it and closes
                raise
            await _internal_error(scope)(scope, receive, send)
        finally:
            if self.stream:
                elapsed = time.perf_counter_ns() - started
                self.entries.append(
                    (
                        scope.get("client"),
                        scope["method"],
                        scope["path"],
                        scope.get(STATUS, 500),
                        elapsed,
                    )
                )

    def flush(self) -> None:
        """Write out the lines of the requests that ended since the last flush."""
        if self.stream is None:
            return
        entries, self.entries = self.entries, []
        lines = [
            f'{client[0] if client else "-"} "{method} {path}" {status} {elapsed // 1000}us\n'
            for client, method, path, status, elapsed in entries
        ]
        try:
            self.stream.write("".join(lines))
            self.stream.flush()
        except (OSError, ValueError) as error:  # stdout closed, or its reader gone
            logger.error("access log stopped: cannot write it: %s", error)
            self.stream = None  # keep serving; and stop collecting lines nobody can read


class BearerAuth:
    """Refuse every request under /v1 (but the public paths) without an accepted key.

    It runs before routing, so an unauthenticated client learns nothing: no 404, no 400.
    Keys are compared as SHA-256 digests with hmac.compare_digest, every key every time.
    The 401 carries the headers the path's endpoint would have added (getPet's deprecation).
    """

    def __init__(
        self,
        app: ASGIApp,
        keys: Sequence[str],
        public_paths: Sequence[str],
        headers_for: Callable[[Scope], RawHeaders],
    ) -> None:
        self.app = app
        self.digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        self.public_paths = frozenset(public_paths)
        self.headers_for = headers_for
        challenge = f'Bearer realm="{BEARER_REALM}"'
        # Built once (the 401 is a hot path too), by whether a bearer token was sent at all.
        self.refusals = {
            False: error_response(
                401,
                ErrorCode.UNAUTHORIZED,
                "Missing credential: send Authorization: Bearer <API key>",
                {"WWW-Authenticate": challenge},
            ),
            True: error_response(
                401,
                ErrorCode.UNAUTHORIZED,
                "The API key is not accepted",
                {"WWW-Authenticate": f'{challenge}, error="invalid_token"'},
            ),
        }

    def accepts(self, token: bytes) -> bool:
        digest = hashlib.sha256(token).digest()
        accepted = False
        for known in self.digests:
            accepted |= hmac.compare_digest(digest, known)
        return accepted

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = _route_path(scope)
        if (not path.startswith("/v1/") and path != "/v1") or path in self.public_paths:
            await self.app(scope, receive, send)
            return
        authorization = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        scheme, _, token = authorization.partition(b" ")
        token = token.strip(b" \t")
        is_bearer = scheme.lower() == b"bearer" and bool(token)
        if is_bearer and self.accepts(token):
            await self.app(scope, receive, send)
            return
        refusal = self.refusals[is_bearer]
        response = JSONResponse(bytes(refusal.body), 401)
        response.raw_headers = [*refusal.raw_headers, *self.headers_for(scope)]
        await response(scope, receive, send)


# --------------------------------------------------------------------------- handlers

_STATUS_BY_VALUE: Final = {status.value: status for status in PetStatus}


def _decimal(text: str) -> int | None:
    """The integer written as 1 to 19 ASCII digits, maybe after a "-"; else None. (int() alone
    takes " 5", "+5", "5_0", Arabic-Indic digits, and digits without end.)"""
    digits = text[1:] if text[:1] == "-" else text
    return int(text) if 0 < len(digits) <= 19 and digits.isascii() and digits.isdigit() else None


def _query(query_string: bytes, names: frozenset[str]) -> dict[str, str]:
    """The values of these query parameters, each at most once (400 if repeated); others are
    ignored. Starlette's QueryParams costs 3 us; this, under one."""
    params: dict[str, str] = {}
    for pair in query_string.decode("latin-1").split("&") if query_string else ():
        name, _, value = pair.partition("=")
        if "%" in pair or "+" in pair:  # decoded as urllib.parse.parse_qsl does
            name, value = urllib.parse.unquote_plus(name), urllib.parse.unquote_plus(value)
        if name in names:
            if name in params:
                raise _invalid(f"Query parameter `{name}` is given more than once")
            params[name] = value
    return params


_LIST_PARAMETERS: Final = frozenset({"limit", "status", "after"})


def _list_query(query_string: bytes) -> tuple[int, PetStatus | None, int]:
    params = _query(query_string, _LIST_PARAMETERS)
    limit, status, after = LIMIT_DEFAULT, None, 0
    if (text := params.get("limit")) is not None:
        value = _decimal(text)
        if value is None or not LIMIT_MIN <= value <= LIMIT_MAX:
            raise _invalid(
                f"Query parameter `limit` must be an integer from {LIMIT_MIN} to {LIMIT_MAX}"
            )
        limit = value
    if (text := params.get("status")) is not None:
        status = _STATUS_BY_VALUE.get(text)
        if status is None:
            allowed = ", ".join(_STATUS_BY_VALUE)
            raise _invalid(f"Query parameter `status` must be one of {allowed}")
    if (text := params.get("after")) is not None:
        value = _decimal(text)
        if value is None or not 0 <= value <= INT64_MAX:
            raise _invalid(f"Query parameter `after` must be an integer from 0 to {INT64_MAX}")
        after = value
    return limit, status, after


def _is_json(content_type: str | None) -> bool:
    """application/json, with parameters allowed so long as any charset is UTF-8."""
    if content_type is None:
        return False
    if content_type == "application/json":
        return True
    media_type, *parameters = (part.strip().lower() for part in content_type.split(";"))
    if media_type != "application/json":
        return False
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip() == "charset" and value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


def _too_large(limit: int) -> Refused:
    return Refused(
        413,
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"The body is over the limit of {limit} bytes",
        # Close the connection rather than read the rest of a body we won't use.
        {"Connection": "close"},
    )


def _header(scope: Scope, name: bytes) -> str | None:
    """The first header of this lower-case name, as Starlette's Headers.get would give it."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole body, refused early (by Content-Length) or as soon as it passes `limit`."""
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:  # ASGI messages read directly: a Request and its stream() cost more
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused(400, ErrorCode.MALFORMED_JSON, "The body ended early")
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _decode_new_pet(body: bytes) -> NewPet:
    try:
        return new_pet_decoder.decode(body)
    except msgspec.ValidationError as error:  # a subclass of DecodeError: first
        raise Refused(400, ErrorCode.VALIDATION_ERROR, str(error)) from None
    except msgspec.DecodeError as error:
        raise Refused(400, ErrorCode.MALFORMED_JSON, f"Body is not JSON: {error}") from None
    except UnicodeDecodeError:  # msgspec lets this through for bad bytes inside a string
        raise Refused(400, ErrorCode.MALFORMED_JSON, "Body is not JSON: invalid UTF-8") from None


class Health:
    """What /readyz reports: the store is loaded and the process is not shutting down."""

    def __init__(self) -> None:
        self.started = False
        self.stopping = False


class PetRoutes:
    """The endpoints, wired to one store and one set of settings."""

    def __init__(self, store: PetStore, settings: Settings, health: Health) -> None:
        self.store = store
        self.max_body = settings.max_body
        self.health = health
        self.openapi_cache: dict[str, bytes] = {}

    async def list_pets(self, scope: Scope, receive: Receive) -> Response:
        limit, status, after = _list_query(scope["query_string"])
        page = await self.store.page(limit=limit, status=status, after=after)
        if not page.has_more:
            return JSONResponse(encoder.encode(page.pets))
        query = f"limit={limit}&status={status.value}" if status else f"limit={limit}"
        root_path = scope.get("root_path", "")
        link = f'<{root_path}/v1/pets?{query}&after={page.pets[-1].id}>; rel="next"'
        return JSONResponse(encoder.encode(page.pets), 200, [(b"link", link.encode())])

    async def create_pet(self, scope: Scope, receive: Receive) -> Response:
        if not _is_json(_header(scope, b"content-type")):
            raise Refused(
                415,
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json (UTF-8)",
            )
        new_pet = _decode_new_pet(await _read_body(scope, receive, self.max_body))
        try:
            pet = await self.store.add(new_pet)
        except StorageUnavailable as error:
            raise Refused(503, ErrorCode.STORAGE_UNAVAILABLE, str(error)) from None
        location = f"{scope.get('root_path', '')}/v1/pets/{pet.id}"
        return JSONResponse(encoder.encode(pet), 201, [(b"location", location.encode())])

    async def get_pet(self, scope: Scope, receive: Receive) -> Response:
        text: str = scope["path_params"]["petId"]
        pet_id = _decimal(text)
        if pet_id is None or not INT64_MIN <= pet_id <= INT64_MAX:
            raise _invalid(f"petId must be an integer from {INT64_MIN} to {INT64_MAX}")
        pet = await self.store.get(pet_id)
        if pet is None:
            raise Refused(404, ErrorCode.NOT_FOUND, f"No pet has id {pet_id}")
        return JSONResponse(encoder.encode(pet))

    async def openapi(self, scope: Scope, receive: Receive) -> Response:
        root_path = scope.get("root_path", "")
        if root_path not in self.openapi_cache:
            self.openapi_cache[root_path] = encoder.encode(openapi_document(root_path))
        return JSONResponse(self.openapi_cache[root_path])

    async def healthz(self, scope: Scope, receive: Receive) -> Response:
        return JSONResponse(b'{"status":"ok"}')

    async def readyz(self, scope: Scope, receive: Receive) -> Response:
        if not self.health.started or self.health.stopping:
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, "Not serving requests yet")
        if not self.store.writable:
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, "The store takes no writes")
        return JSONResponse(b'{"status":"ready"}')


# --------------------------------------------------------------------------- the app

OPENAPI_PATH: Final = "/v1/openapi.json"


class Petstore:
    """The ASGI app: the middleware around the router, with a handle on both for tests and main."""

    def __init__(self, app: ASGIApp, router: Router, health: Health, access_log: AccessLog) -> None:
        self.app = app
        self.router = router
        self.health = health
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def create_app(
    settings: Settings, store: PetStore, *, access_log: TextIO | None = None
) -> Petstore:
    """Routes, then (outermost last) auth, the access log with its last-resort 500, root path."""
    if not settings.api_keys:
        raise ValueError("settings.api_keys is empty: call with_key() first")
    health = Health()
    handlers = PetRoutes(store, settings, health)
    deprecation = {
        "Deprecation": DEPRECATION,
        "Sunset": SUNSET,
        "Link": f'<{{root_path}}{SUCCESSOR_PATH}>; rel="successor-version"',
    }

    @contextlib.asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        await store.open()
        # `log` is the AccessLog layer, made below around the others.
        flusher = asyncio.create_task(_flush_every(log, 0.5)) if access_log else None
        health.started = True
        try:
            yield
        finally:
            health.stopping = True
            if flusher:
                flusher.cancel()
            await store.close()
            log.flush()

    router = IndexedRouter(
        [
            Route("/v1/pets/{petId}", Endpoint({"GET": handlers.get_pet}, deprecation)),
            Route("/v1/pets", Endpoint({"GET": handlers.list_pets, "POST": handlers.create_pet})),
            Route(OPENAPI_PATH, Endpoint({"GET": handlers.openapi})),
            Route("/healthz", Endpoint({"GET": handlers.healthz})),
            Route("/readyz", Endpoint({"GET": handlers.readyz})),
        ],
        lifespan=lifespan,
    )
    app: ASGIApp = BearerAuth(router, settings.api_keys, [OPENAPI_PATH], router.headers_for)
    app = log = AccessLog(app, access_log)
    if settings.root_path:
        app = RootPath(app, settings.root_path)
    return Petstore(app, router, health, log)


async def _flush_every(log: AccessLog, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        log.flush()


def _read_seed(path: str) -> list[SeedPet]:
    try:
        with open(path, "rb") as file:
            return seed_decoder.decode(file.read())
    except OSError as error:
        raise SettingsError(f"seed file {path}: cannot read: {error.strerror}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as error:
        reason = str(error) if isinstance(error, msgspec.DecodeError) else "invalid UTF-8"
        raise SettingsError(f"seed file {path}: not a JSON array of pets: {reason}") from None


def open_store(settings: Settings) -> PetStore:
    """The store the settings ask for, loaded and seeded; SettingsError says why it can't be."""
    seed = _read_seed(settings.seed) if settings.seed is not None else None
    if seed is not None:
        try:
            seed_pets(seed, last_id=0)  # a bad seed stops the start before any file is made
        except ValueError as error:
            raise SettingsError(f"seed file {settings.seed}: {error}") from None
    try:
        store: PetStore = MemoryStore() if settings.data is None else FileStore(settings.data)
    except DataFileError as error:
        raise SettingsError(f"data file {error}") from None
    if seed is not None:
        try:
            seeded = store.seed(seed)
        except (ValueError, DataFileError) as error:
            raise SettingsError(f"seed file {settings.seed}: {error}") from None
        if seeded:
            logger.info("seeded %d pets from %s", len(seed), settings.seed)
    return store


# --------------------------------------------------------------------------- the server


class StallGuard(HttpToolsProtocol):
    """uvicorn's HTTP protocol, plus a deadline: a client gets `client_timeout` seconds to send
    a whole request head, and its body may not stall longer than that. uvicorn alone waits
    forever, which lets a slowloris client hold connections open.

    It costs a request one stamp of the clock: a single timer a connection wakes up every
    `client_timeout` seconds and reads what the client still owes from uvicorn's own state.
    """

    client_timeout: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._began = 0.0  # when the connection opened or the current request began
        self._progress = 0.0  # when the current request last sent something
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._began = self._progress = self.loop.time()
        self._timer = self.loop.call_at(self._began + self.client_timeout, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began = self._progress = self.loop.time()

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._progress = self.loop.time()

    def _waiting_since(self) -> float | None:
        """Since when the client owes us bytes: the head, or the body; None when it owes none."""
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope:  # this request has no cycle yet
            return self._began
        return self._progress if cycle.more_body else None

    def _check(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        since = self._waiting_since()
        if since is not None and now - since >= self.client_timeout:
            self.logger.info("closing a connection that stalled for %.1fs", self.client_timeout)
            self.transport.close()
            return
        self._timer = self.loop.call_at((since or now) + self.client_timeout, self._check)


def _guard(timeout: float) -> type[StallGuard]:
    return type("StallGuard", (StallGuard,), {"client_timeout": timeout})


class _Server(uvicorn.Server):
    """uvicorn's server that also turns /readyz to 503 as soon as shutdown begins."""

    def __init__(self, config: uvicorn.Config, health: Health) -> None:
        super().__init__(config)
        self.health = health

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.health.stopping = True
        super().handle_exit(sig, frame)


def _configure_logging(level: str) -> None:
    """The service's own lines (warnings, errors, tracebacks) to stderr beside uvicorn's."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)-9s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(LOG_LEVELS[level])
    logger.propagate = False


def _build(settings: Settings) -> Petstore:
    store = open_store(settings)
    access_log = None
    if settings.log_level in ("info", "debug", "trace"):
        # A buffer of its own on stdout: PYTHONUNBUFFERED (set in many images) would otherwise
        # turn every line into a write(2). The lifespan flushes it every half second.
        access_log = open(  # noqa: SIM115 - lives as long as the process
            sys.stdout.fileno(),
            "w",
            buffering=1 << 16,
            encoding="utf-8",
            errors="backslashreplace",
            closefd=False,
        )
    return create_app(settings, store, access_log=access_log)


def main(argv: Sequence[str] | None = None) -> int:
    """`python app.py [flags]`: serve until SIGTERM or Ctrl-C."""
    try:
        settings = load_settings(sys.argv[1:] if argv is None else argv, os.environ)
        _configure_logging(settings.log_level)
        settings = with_key(settings, sys.stdout)
        app = _build(settings)
    except SettingsError as error:
        print(f"petstore: {error}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        app.app,  # the stack itself: Petstore's own call is one await more a request
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # ours is cheaper and keeps the duration
        http=_guard(settings.client_timeout),
        lifespan="on",
        timeout_graceful_shutdown=5,
        server_header=False,
    )
    _Server(config, app.health).run()
    return 0


def __getattr__(name: str) -> Any:
    """`uvicorn app:app`: the app built from PETSTORE_* variables, on first use only."""
    if name != "app":
        raise AttributeError(name)
    try:
        settings = load_settings([], os.environ)
        _configure_logging(settings.log_level)
        settings = with_key(settings, sys.stdout)
        if multiprocessing.parent_process() is not None and settings.data is None:
            raise SettingsError(
                "several workers would each keep their own in-memory pets: run one worker"
            )
        app = _build(settings)
    except SettingsError as error:
        print(f"petstore: {error}", file=sys.stderr)
        # uvicorn's own code for a start that failed: its --workers supervisor then stops
        # instead of starting the worker again and again.
        raise SystemExit(STARTUP_FAILURE) from None
    globals()["app"] = app
    return app


if __name__ == "__main__":
    sys.exit(main())
