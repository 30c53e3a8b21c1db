"""The petstore: its handlers and `create_app`; `python app.py` and `uvicorn app:app` start it."""

from __future__ import annotations

import sys

if __name__ == "__main__" and sys.argv[1:2] == ["healthcheck"]:  # the image's probe: no more
    from healthcheck import main as check

    sys.exit(check(sys.argv[2:]))

import contextlib
import dataclasses
import functools
import multiprocessing
import os
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Router
from starlette.types import ASGIApp, Receive, Scope, Send

import schemas
from filestore import DataFileError, FileStore
from middleware import TENANT, BearerAuth, Cors, Requests, over_limit
from observability import Metrics, configure_logging, flush_logs, key_digest, refuse_start
from openapi import docs_routes, openapi_document
from pgstore import DatabaseError, DatabaseStore
from schemas import (
    PETS_PATH,
    ApiError,
    ErrorCode,
    JSONResponse,
    NewPet,
    Pet,
    Route,
    error_response,
    invalid,
    not_found,
)
from server import bound_socket, serve
from settings import Settings, SettingsError, asks_json, load_settings, with_key
from store import IdempotencyConflict, MemoryStore, PetStore, seed_pets
from testplane import Plane, Tenant

GET_PET_PATH: Final = PETS_PATH + "/{petId}"
_INTEGER: Final = re.compile(r"(-?)0*([0-9]{1,19})")
_KEY: Final = re.compile(schemas.IDEMPOTENCY_KEY_PATTERN)
_STATUSES: Final = {status.value: status for status in schemas.PetStatus}
UNSUPPORTED: Final = ErrorCode.UNSUPPORTED_MEDIA_TYPE
_DEPRECATED: Final = (
    (b"deprecation", schemas.DEPRECATION.encode()),
    (b"sunset", schemas.SUNSET.encode()),
)


@dataclasses.dataclass
class Health:
    """What /readyz reports besides the store: loaded, and not shutting down."""

    started: bool = False
    stopping: bool = False

    def stop(self) -> None:
        self.stopping = True


def _integer(text: str, what: str, low: int, high: int) -> int:
    """`text` as an integer from `low` to `high`; a 400 naming `what` for anything else."""
    found = _INTEGER.fullmatch(text)
    if not found or not low <= (value := int(found[1] + found[2])) <= high:
        raise invalid(f"{what} must be an integer from {low} to {high}")
    return value


def _query(query: Mapping[str, str], name: str, low: int, high: int, default: int) -> int:
    """An integer query parameter; a 400 for anything else."""
    text = query.get(name)
    return default if text is None else _integer(text, f"Query parameter `{name}`", low, high)


def header_fields(request: Request) -> dict[bytes, bytes]:
    """The first value of each header, by name, in one pass (each lookup in Starlette's Headers
    is a pass of its own); `request.headers.getlist` still reads a name that may repeat."""
    return dict(reversed(request.scope["headers"]))


def idempotency_key(request: Request, fields: dict[bytes, bytes]) -> str | None:
    """The request's Idempotency-Key, bare or quoted (`"abc"` is `abc`); a 400 for anything but
    1 to 255 visible ASCII characters, or two of them."""
    if b"idempotency-key" not in fields:
        return None
    values = request.headers.getlist("idempotency-key")
    if len(values) > 1 or not _KEY.match(value := values[0].rstrip(" \t")):
        most = schemas.IDEMPOTENCY_KEY_MAX
        raise invalid(f"Idempotency-Key must be one value of 1 to {most} visible ASCII characters,"
                      " bare or quoted")  # fmt: skip
    return re.sub(r"\\(.)", r"\1", value[1:-1]) if value.startswith('"') else value


def require_json(request: Request, fields: dict[bytes, bytes]) -> None:
    """A 415 unless the body is JSON (UTF-8, if a charset is named), sent as it is."""
    content_type = fields.get(b"content-type", b"").decode("latin-1")
    if content_type != "application/json":  # else parameters to look at
        media_type, *parameters = content_type.lower().split(";")
        utf8 = all(p.replace(" ", "") in ("charset=utf-8", 'charset="utf-8"') for p in parameters)
        if media_type.strip() != "application/json" or not utf8:
            raise ApiError(415, UNSUPPORTED, "Content-Type must be application/json (UTF-8)")
    if b"content-encoding" in fields:
        encoding = ",".join(request.headers.getlist("content-encoding"))
        if any(coding.strip().lower() not in ("", "identity") for coding in encoding.split(",")):
            raise ApiError(415, UNSUPPORTED, f"Content-Encoding {encoding!r} is not supported:"
                           " send the body as it is")  # fmt: skip


def _too_large(limit: int, headers: dict[str, str] | None = None) -> ApiError:
    """The 413 of a body over `limit` bytes."""
    return ApiError(
        413, ErrorCode.PAYLOAD_TOO_LARGE, f"The body is over the limit of {limit} bytes", headers
    )


async def read_body(request: Request, limit: int, fields: dict[bytes, bytes]) -> bytes:
    """The whole body; a 413 as soon as it passes `limit` bytes (at once, by Content-Length:
    the rest is then read and dropped, so that a client sending it gets its answer)."""
    if over_limit(fields.get(b"content-length", b""), limit):  # refused before a byte is read
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while (received := await request.receive())["type"] == "http.request":
        chunks.append(chunk := received.get("body", b""))
        if (size := size + len(chunk)) > limit:  # a stream may not end: the connection goes
            raise _too_large(limit, {"Connection": "close"})
        if not received.get("more_body"):
            return b"".join(chunks)
    raise ClientDisconnect()


class Handlers:
    """The endpoints; each acts on the tenant of the request's key."""

    def __init__(self, settings: Settings, store: PetStore, health: Health) -> None:
        self.settings, self.store, self.health = settings, store, health

    async def pets(self, request: Request) -> Response:
        if request.scope["method"] == "POST":
            return await self.create_pet(request)
        return await self.list_pets(request)

    async def list_pets(self, request: Request) -> Response:
        tenant: Tenant = request.scope[TENANT]
        if tenant.faults and (fault := await tenant.faults.intercept(request, "listPets")):
            return fault
        # As Starlette's QueryParams reads it (the last of a name counts), without its lists.
        raw = request.scope["query_string"].decode("latin-1")
        params = dict(parse_qsl(raw, keep_blank_values=True))
        limit = _query(params, "limit", schemas.LIMIT_MIN, schemas.LIMIT_MAX, schemas.LIMIT_DEFAULT)
        after = _query(params, "after", 0, schemas.INT64_MAX, 0)
        text = params.get("status")
        if (status := _STATUSES.get(text or "")) is None and text is not None:
            raise invalid(f"Query parameter `status` must be one of {', '.join(_STATUSES)}")
        page = await tenant.store.page(limit, status, after)
        if not page.has_more:
            return JSONResponse(page.pets)
        query = f"limit={limit}" + (f"&status={status.value}" if status else "")
        query += f"&after={page.pets[-1].id}"
        link = f'<{request.scope.get("root_path", "")}{PETS_PATH}?{query}>; rel="next"'
        return JSONResponse(page.pets, headers={"Link": link})

    async def create_pet(self, request: Request) -> Response:
        tenant: Tenant = request.scope[TENANT]
        key, refused, fields = None, None, header_fields(request)
        try:
            key = idempotency_key(request, fields)
        except ApiError as error:  # fault rules come first: refused after them
            refused = error
        held = key if key is not None and key not in tenant.keys_in_flight else None
        if held is not None:
            tenant.keys_in_flight.add(held)
        try:
            if tenant.faults and (fault := await tenant.faults.intercept(request, "createPet")):
                return fault
            if refused:
                raise refused
            if key is not None and held is None:
                raise IdempotencyConflict(key)
            new_pet = schemas.decode(await self.read_json(request, fields), NewPet)
            pet, replayed = await tenant.store.add(new_pet, key)
        finally:
            tenant.keys_in_flight.discard(held or "")
        headers = {"Location": f"{request.scope.get('root_path', '')}{PETS_PATH}/{pet.id}"}
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        return JSONResponse(pet, 201, headers)

    async def read_json(self, request: Request, fields: dict[bytes, bytes] | None = None) -> bytes:
        """A JSON body of at most --max-body bytes, else a 415 or a 413: createPet's rules, which
        the plane's POSTs follow too."""
        fields = header_fields(request) if fields is None else fields
        require_json(request, fields)
        return await read_body(request, self.settings.max_body, fields)

    async def get_pet(self, request: Request) -> Response:
        tenant: Tenant = request.scope[TENANT]
        if tenant.faults and (fault := await tenant.faults.intercept(request, "getPet")):
            return fault
        text = request.path_params["petId"]
        pet_id = _integer(text, "petId", schemas.INT64_MIN, schemas.INT64_MAX)
        pet = await tenant.store.get(pet_id)
        if pet is None:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"No pet has id {pet_id}")
        return JSONResponse(pet)

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        problem = self.store.unwritable if self.health.started else "Not serving requests yet"
        problem = "Shutting down" if self.health.stopping else problem
        if problem is not None:
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, problem)
        return JSONResponse({"status": "ready"})


@dataclasses.dataclass
class Petstore:
    """The ASGI app, with handles on its parts for `main` and tests."""

    app: ASGIApp
    router: Router
    health: Health
    tenant: Tenant
    metrics: Metrics | None
    requests: Requests
    plane: Plane | None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)

    def stop(self) -> None:
        """SIGTERM: /readyz says so, and journal reads that wait answer now."""
        self.health.stop()
        if self.plane is not None:
            self.plane.end_waits()


@functools.cache
def _deprecation(root_path: str) -> list[tuple[bytes, bytes]]:
    """getPet's headers, on every answer of its path."""
    link = f'<{root_path}{PETS_PATH}>; rel="successor-version"'.encode()
    return [*_DEPRECATED, (b"link", link)]


def create_app(settings: Settings, store: PetStore) -> Petstore:
    """The service over `store`: routes, then auth, CORS and the request layer around them; the
    test-control plane and its faults only with an admin key."""
    if not settings.api_keys:
        raise ValueError("settings.api_keys is empty: call with_key() first")
    health = Health()
    handlers = Handlers(settings, store, health)
    tenant = Tenant.kept(store, settings) if settings.admin_keys else Tenant(store)
    keys = {key_digest(key.encode()): tenant for key in settings.api_keys}
    plane = Plane(tenant, settings, keys, handlers.read_json) if settings.admin_keys else None
    tenants = plane.tenants if plane else {}
    datafile = isinstance(store, FileStore)
    metrics = Metrics(store, tenants, datafile=datafile) if settings.metrics else None
    if metrics and isinstance(store, FileStore):
        store.on_sync = metrics.sync_duration.observe
        store.on_write_error = metrics.write_errors.inc

    async def scrape(request: Request) -> Response:
        return Response(metrics.exposition() if metrics else b"", media_type=CONTENT_TYPE_LATEST)

    async def openapi(request: Request) -> Response:
        root_path = request.scope.get("root_path", "")
        return JSONResponse(openapi_document(root_path, plane=plane is not None))

    routes: list[BaseRoute] = [
        Route(PETS_PATH, handlers.pets, methods=["GET", "POST"]),
        Route(GET_PET_PATH, handlers.get_pet, methods=["GET"]),
        Route(schemas.OPENAPI_PATH, openapi, methods=["GET"]),
        Route("/healthz", handlers.healthz, methods=["GET"]),
        Route("/readyz", handlers.readyz, methods=["GET"]),
        *([Route("/metrics", scrape, methods=["GET"])] if metrics else []),
        *docs_routes(),
        *(plane.routes() if plane else []),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Router) -> AsyncIterator[None]:
        try:
            await store.open()
        except DatabaseError as error:  # a schema this service can't use: one line, no traceback
            refuse_start(str(error), settings.log_format == "json", settings.secrets)
            os._exit(2)
        health.started = True
        try:
            yield
        finally:
            health.stopping = True
            await store.close()
            requests.flush()
            flush_logs()

    # No redirect to a path with or without a trailing slash: a non-2xx without an Error.
    router = Router(routes, redirect_slashes=False, default=not_found, lifespan=lifespan)
    app: ASGIApp = BearerAuth(
        router, tenants=keys, default=tenant, admin_keys=settings.admin_keys, routes=routes
    )
    if settings.cors_origins:
        app = Cors(app, settings.cors_origins)
    app = requests = Requests(app, settings, metrics, {GET_PET_PATH: _deprecation})
    return Petstore(app, router, health, tenant, metrics, requests, plane)


def open_store(settings: Settings) -> PetStore:
    """The store the settings ask for, seeded; SettingsError when it can't be opened."""
    seed: list[Pet] = []
    if settings.seed is not None:
        try:
            with open(settings.seed, "rb") as file:
                items = schemas.decode(file.read(), list[schemas.SeedPet])
            seed = seed_pets(items)
        except OSError as error:
            raise SettingsError(f"--seed {settings.seed}: cannot read: {error.strerror}") from None
        except (ApiError, ValueError) as error:
            reason = str(error).removeprefix("Body is not JSON: ")
            raise SettingsError(
                f"--seed {settings.seed}: not a JSON array of pets: {reason}"
            ) from None
    if settings.database:
        return DatabaseStore(settings.database, seed, password=settings.database_password)
    if settings.data:
        try:
            return FileStore(settings.data, seed)
        except DataFileError as error:
            raise SettingsError(str(error)) from None
    return MemoryStore(seed)


def _start(argv: Sequence[str], *, uvicorn: bool) -> tuple[Settings, str, Petstore, Any]:
    """The settings, a generated key's line, the app and (for `python app.py`) the bound socket;
    or the one line that says why not, and SystemExit."""
    settings = None
    try:
        settings, key_line = with_key(load_settings(argv, os.environ))
        configure_logging(settings)
        workers = uvicorn and multiprocessing.parent_process() is not None
        shared = (settings.data or settings.database) and not key_line and not settings.admin_keys
        if workers and not shared and "--reload" not in sys.argv:
            raise SettingsError(
                "several workers need a shared store and configured keys, and no admin key:"
                " set PETSTORE_DATABASE_URL and PETSTORE_API_KEYS, or run one worker"
            )
        sock = None if uvicorn else bound_socket(settings)  # before the store: a port in use first
        return settings, key_line, create_app(settings, open_store(settings)), sock
    except SettingsError as error:
        refuse_start(str(error), asks_json(argv, os.environ), settings.secrets if settings else ())
        raise SystemExit(3 if uvicorn else 2) from None  # 3: uvicorn's; its workers then stop


def main(argv: Sequence[str]) -> int:
    """`python app.py [flags]`: serve until SIGTERM or Ctrl-C."""
    settings, key_line, petstore, sock = _start(argv, uvicorn=False)
    serve(petstore.app, settings, sock, petstore.stop, key_line)
    return 0


def __getattr__(name: str) -> Any:
    """`uvicorn app:app`: the app built from PETSTORE_* variables, on first use."""
    if name != "app":
        raise AttributeError(name)
    _, key_line, petstore, _ = _start([], uvicorn=True)
    sys.stdout.write(key_line)
    sys.stdout.flush()
    globals()["app"] = petstore
    return petstore


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
