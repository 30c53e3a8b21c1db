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
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TextIO

import msgspec
import uvicorn
from starlette.applications import Starlette
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
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


class JSONResponse(Response):
    """A response whose body is already JSON bytes."""

    media_type = "application/json"


def error_response(
    status: int, code: ErrorCode, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    """The Error shape, with `status` equal to the HTTP status."""
    body = encoder.encode(Error(code=code, message=message, status=status))
    return JSONResponse(body, status_code=status, headers=headers)


_CODE_BY_STATUS: Final = {
    400: ErrorCode.VALIDATION_ERROR,
    401: ErrorCode.UNAUTHORIZED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    503: ErrorCode.STORAGE_UNAVAILABLE,
}


def _allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """Every method some route takes at this path (Starlette's Allow names one route's only)."""
    probe = {**scope, "method": ""}
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.methods and route.matches(probe)[0] is not Match.NONE:
            methods |= route.methods
    return sorted(methods)


async def http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (no route, wrong method) in the Error shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allowed = _allowed_methods(request.app.router.routes, request.scope)
        return error_response(
            405,
            ErrorCode.METHOD_NOT_ALLOWED,
            f"Method {request.method} is not allowed here; allowed: {', '.join(allowed)}",
            {"Allow": ", ".join(allowed)},
        )
    if exc.status_code == 404:
        return error_response(404, ErrorCode.NOT_FOUND, "No resource at this path")
    code = _CODE_BY_STATUS.get(exc.status_code, ErrorCode.INTERNAL_ERROR)
    return error_response(exc.status_code, code, exc.detail, exc.headers)


async def refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    return exc.response


async def internal_error(request: Request, exc: Exception) -> Response:
    """A failure in the outer middleware: a 500 that tells nothing (uvicorn logs the traceback)."""
    return error_response(500, ErrorCode.INTERNAL_ERROR, "Internal error; the log has details")


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
    """One line per request (client, method, path, status, duration), never a header.

    Lines go to a buffered text stream that the lifespan flushes every half second, which costs
    a few microseconds a request where stdlib logging costs tens.
    """

    def __init__(self, app: ASGIApp, stream: TextIO) -> None:
        self.app = app
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            client = scope.get("client")
            elapsed = (time.perf_counter() - started) * 1000
            self.stream.write(
                f'{client[0] if client else "-"} "{scope["method"]} {scope["path"]}" '
                f"{status} {elapsed:.2f}ms\n"
            )


class InternalErrors:
    """Anything unexpected: log it with its traceback, answer 500 `internal_error`, say nothing.

    Starlette's own catch-all sits outside every middleware; this one sits inside the
    deprecation headers, so that even getPet's 500 carries them.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response_started = False

        async def send_tracking(message: Message) -> None:
            nonlocal response_started
            response_started |= message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracking)
        except Exception:
            logger.exception("unexpected error in %s %s", scope["method"], scope["path"])
            if response_started:  # too late for an Error body: the server closes the connection
                raise
            response = error_response(
                500, ErrorCode.INTERNAL_ERROR, "Internal error; the log has details"
            )
            await response(scope, receive, send)


class BearerAuth:
    """Refuse every request under /v1 (but the OpenAPI document) without an accepted key.

    It runs before routing, so an unauthenticated client learns nothing: no 404, no 400.
    Keys are compared as SHA-256 digests with hmac.compare_digest, every key every time.
    """

    def __init__(self, app: ASGIApp, keys: Sequence[str], public_paths: Sequence[str]) -> None:
        self.app = app
        self.digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        self.public_paths = frozenset(public_paths)

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
        if not (path == "/v1" or path.startswith("/v1/")) or path in self.public_paths:
            await self.app(scope, receive, send)
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        scheme, _, token = (authorization or b"").partition(b" ")
        token = token.strip(b" \t")
        if scheme.lower() == b"bearer" and token and self.accepts(token):
            await self.app(scope, receive, send)
            return
        if scheme.lower() == b"bearer" and token:
            challenge = f'Bearer realm="{BEARER_REALM}", error="invalid_token"'
            message = "The API key is not accepted"
        else:
            challenge = f'Bearer realm="{BEARER_REALM}"'
            message = "Missing credential: send Authorization: Bearer <API key>"
        response = error_response(
            401, ErrorCode.UNAUTHORIZED, message, {"WWW-Authenticate": challenge}
        )
        await response(scope, receive, send)


class DeprecationHeaders:
    """Deprecation, Sunset and the successor link on every response of a deprecated route,
    errors and 401s included."""

    def __init__(self, app: ASGIApp, route: Route) -> None:
        self.app = app
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.route.matches(scope)[0] is not Match.FULL:
            await self.app(scope, receive, send)
            return
        successor = f'<{scope.get("root_path", "")}{SUCCESSOR_PATH}>; rel="successor-version"'
        extra = [
            (b"deprecation", DEPRECATION.encode()),
            (b"sunset", SUNSET.encode()),
            (b"link", successor.encode()),
        ]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


# --------------------------------------------------------------------------- routes

_DIGITS: Final = re.compile(r"[0-9]{1,19}")
_SIGNED_DIGITS: Final = re.compile(r"-?[0-9]{1,19}")


class Refused(Exception):
    """A request the service turns down: raised anywhere in an endpoint, answered as Error."""

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


def _single(params: QueryParams, name: str) -> str | None:
    values = params.getlist(name)
    if len(values) > 1:
        raise _invalid(f"Query parameter `{name}` is given more than once")
    return values[0] if values else None


def _list_query(params: QueryParams) -> tuple[int, PetStatus | None, int]:
    limit, status, after = LIMIT_DEFAULT, None, 0
    if (text := _single(params, "limit")) is not None:
        if not _DIGITS.fullmatch(text) or not LIMIT_MIN <= int(text) <= LIMIT_MAX:
            raise _invalid(
                f"Query parameter `limit` must be an integer from {LIMIT_MIN} to {LIMIT_MAX}"
            )
        limit = int(text)
    if (text := _single(params, "status")) is not None:
        try:
            status = PetStatus(text)
        except ValueError:
            allowed = ", ".join(status.value for status in PetStatus)
            raise _invalid(f"Query parameter `status` must be one of {allowed}") from None
    if (text := _single(params, "after")) is not None:
        if not _DIGITS.fullmatch(text) or int(text) > INT64_MAX:
            raise _invalid(f"Query parameter `after` must be an integer from 0 to {INT64_MAX}")
        after = int(text)
    return limit, status, after


def _is_json(content_type: str | None) -> bool:
    """application/json, with parameters allowed so long as any charset is UTF-8."""
    if content_type is None:
        return False
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


async def _read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused early (by Content-Length) or as soon as it passes `limit`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise Refused(400, ErrorCode.MALFORMED_JSON, "The body ended early") from None
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

    async def list_pets(self, request: Request) -> Response:
        limit, status, after = _list_query(request.query_params)
        page = await self.store.page(limit=limit, status=status, after=after)
        headers = None
        if page.has_more:
            query = f"limit={limit}" + (f"&status={status.value}" if status else "")
            root_path = request.scope.get("root_path", "")
            link = f'<{root_path}/v1/pets?{query}&after={page.pets[-1].id}>; rel="next"'
            headers = {"Link": link}
        return JSONResponse(encoder.encode(page.pets), headers=headers)

    async def create_pet(self, request: Request) -> Response:
        if not _is_json(request.headers.get("content-type")):
            raise Refused(
                415,
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                "Content-Type must be application/json (UTF-8)",
            )
        new_pet = _decode_new_pet(await _read_body(request, self.max_body))
        try:
            pet = await self.store.add(new_pet)
        except StorageUnavailable as error:
            raise Refused(503, ErrorCode.STORAGE_UNAVAILABLE, str(error)) from None
        location = f"{request.scope.get('root_path', '')}/v1/pets/{pet.id}"
        return JSONResponse(encoder.encode(pet), status_code=201, headers={"Location": location})

    async def get_pet(self, request: Request) -> Response:
        text: str = request.path_params["petId"]
        if not _SIGNED_DIGITS.fullmatch(text) or not INT64_MIN <= int(text) <= INT64_MAX:
            raise _invalid(f"petId must be an integer from {INT64_MIN} to {INT64_MAX}")
        pet = await self.store.get(int(text))
        if pet is None:
            raise Refused(404, ErrorCode.NOT_FOUND, f"No pet has id {int(text)}")
        return JSONResponse(encoder.encode(pet))

    async def openapi(self, request: Request) -> Response:
        root_path = request.scope.get("root_path", "")
        if root_path not in self.openapi_cache:
            self.openapi_cache[root_path] = encoder.encode(openapi_document(root_path))
        return JSONResponse(self.openapi_cache[root_path])

    async def healthz(self, request: Request) -> Response:
        return JSONResponse(b'{"status":"ok"}')

    async def readyz(self, request: Request) -> Response:
        if not self.health.started or self.health.stopping:
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, "Not serving requests yet")
        if not self.store.writable:
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, "The store takes no writes")
        return JSONResponse(b'{"status":"ready"}')


# --------------------------------------------------------------------------- the app

OPENAPI_PATH: Final = "/v1/openapi.json"


def create_app(
    settings: Settings, store: PetStore, *, access_log: TextIO | None = None
) -> Starlette:
    """The ASGI app: routes, then auth, deprecation headers, access log and root path."""
    if not settings.api_keys:
        raise ValueError("settings.api_keys is empty: call with_key() first")
    health = Health()
    routes = PetRoutes(store, settings, health)
    get_pet = Route("/v1/pets/{petId}", routes.get_pet, methods=["GET"])

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await store.open()
        flusher = asyncio.create_task(_flush_every(access_log, 0.5)) if access_log else None
        health.started = True
        try:
            yield
        finally:
            health.stopping = True
            if flusher:
                flusher.cancel()
            await store.close()
            if access_log:
                access_log.flush()

    middleware = [  # outermost first
        Middleware(DeprecationHeaders, route=get_pet),
        Middleware(InternalErrors),
        Middleware(BearerAuth, keys=settings.api_keys, public_paths=[OPENAPI_PATH]),
    ]
    if access_log is not None:
        middleware.insert(0, Middleware(AccessLog, stream=access_log))
    if settings.root_path:
        middleware.insert(0, Middleware(RootPath, root_path=settings.root_path))
    app = Starlette(
        routes=[
            Route("/v1/pets", routes.list_pets, methods=["GET"]),
            Route("/v1/pets", routes.create_pet, methods=["POST"]),
            get_pet,
            Route(OPENAPI_PATH, routes.openapi, methods=["GET"]),
            Route("/healthz", routes.healthz, methods=["GET"]),
            Route("/readyz", routes.readyz, methods=["GET"]),
        ],
        middleware=middleware,
        exception_handlers={
            Refused: refused,
            HTTPException: http_error,
            Exception: internal_error,
        },
        lifespan=lifespan,
    )
    # A trailing-slash redirect would be a 3xx without the Error shape: unknown paths are 404.
    app.router.redirect_slashes = False
    app.state.health = health
    return app


async def _flush_every(stream: TextIO, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        stream.flush()


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

    Moving the deadline is a float assignment; one timer a connection checks it when due and
    schedules itself again if the deadline moved (a timer a request would cost far more).
    """

    client_timeout: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None

    def _arm(self) -> None:
        self._deadline = self.loop.time() + self.client_timeout
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._check)

    def _check(self) -> None:
        self._timer = None
        if self._deadline is None or self.transport.is_closing():
            return
        if self.loop.time() < self._deadline:
            self._timer = self.loop.call_at(self._deadline, self._check)
            return
        self.logger.info("closing a connection that stalled for %.1fs", self.client_timeout)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:
            self._arm()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm()  # from here on the deadline is for the body to make progress

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._arm()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._deadline = None  # a whole request is in: the timer, when due, does nothing


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


def _build(settings: Settings) -> Starlette:
    store = open_store(settings)
    access_log = sys.stdout if settings.log_level in ("info", "debug", "trace") else None
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
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # ours is cheaper and keeps the duration
        http=_guard(settings.client_timeout),
        lifespan="on",
        timeout_graceful_shutdown=5,
        server_header=False,
    )
    _Server(config, app.state.health).run()
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
