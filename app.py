"""The petstore: its handlers and `create_app`; `python app.py` and `uvicorn app:app` start it."""

from __future__ import annotations

import signal
import sys

if __name__ == "__main__" and sys.argv[1:2] == ["healthcheck"]:
    # Before the imports below: the image's HEALTHCHECK runs this every 10 s, and needs none
    # of them (healthcheck.py says why).
    from healthcheck import main as check

    sys.exit(check(sys.argv[2:]))

if __name__ == "__main__":  # before the imports below: a stop during them is noted (stops.py)
    from stops import note_stops

    note_stops()

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, TextIO

from starlette.responses import Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import STARTUP_FAILURE

from accesslog import LOG_EVERY, AccessLog
from admin import ADMIN_OPENAPI_PATH, ADMIN_PREFIX, ControlPlane
from datafile import FileStore
from docs import Docs
from faults import Faults
from idempotency import IdempotencyConflict, KeysInFlight
from journal import Journal
from logs import access_log_stream, refuse_start, start_logging
from metrics import CONTENT_TYPE_LATEST, FOLD_EVERY, Metrics, RequestCounts
from middleware import Area, BearerAuth, Cors, Credentials, RootPath
from openapi import openapi_document
from opening import open_store
from parsing import (
    decode_new_pet,
    idempotency_key,
    integer,
    list_query,
    read_body,
    read_body_start,
    require_json,
)
from protocol import http_protocol
from routing import (
    BytesResponse,
    Endpoint,
    IndexedRouter,
    JSONResponse,
    Refused,
    error_response,
    invalid,
    per_root_path,
)
from schemas import (
    ADMIN_REALM,
    API_PREFIX,
    BEARER_REALM,
    DEPRECATION,
    INT64_MAX,
    INT64_MIN,
    PETS_PATH,
    SUNSET,
    ErrorCode,
    encoder,
)
from server import (
    adopt_protocol,
    adopt_server,
    bound_socket,
    check_workers,
    serve,
    uvicorn_config,
    warn_of_unread,
)
from settings import Settings, SettingsError, load_settings, with_key
from stops import stops_asked
from store import PetStore

__all__ = ["Petstore", "create_app", "main"]


class Health:
    """What /readyz reports of the process: the store is loaded and it is not shutting down
    (and, of the store, that it takes creates: PetRoutes.readyz)."""

    def __init__(self) -> None:
        self.started = False
        self.stopping = False

    def stop(self) -> None:
        """Shutdown has begun: not ready any more."""
        self.stopping = True


_KEY: Final = "petstore.idempotency_key"  # where PetRoutes.hold_key leaves the key it holds


class PetRoutes:
    """The endpoints, wired to one store and one set of settings. `journaled`: how much of a
    create's body to read for the journal when it is refused before reading it (0: none)."""

    def __init__(
        self, store: PetStore, settings: Settings, health: Health, journaled: int = 0
    ) -> None:
        self.store = store
        self.journaled = journaled
        self.max_body = settings.max_body
        self.health = health
        self.in_flight = KeysInFlight()
        injected = bool(settings.admin_keys)  # the test-control plane's faults, documented
        self.document = per_root_path(
            lambda root_path: encoder.encode(openapi_document(root_path, injected=injected))
        )

    async def list_pets(self, scope: Scope, receive: Receive) -> Response:
        limit, status, after = list_query(scope["query_string"])
        page = await self.store.page(limit=limit, status=status, after=after)
        if not page.has_more:
            return JSONResponse(encoder.encode(page.pets))
        query = f"limit={limit}&status={status.value}" if status else f"limit={limit}"
        root_path = scope.get("root_path", "")
        link = f'<{root_path}{PETS_PATH}?{query}&after={page.pets[-1].id}>; rel="next"'
        return JSONResponse(encoder.encode(page.pets), 200, [(b"link", link.encode())])

    def hold_key(self, scope: Scope) -> Callable[[], None] | None:
        """A create's Idempotency-Key held from its head to its answer (KeysInFlight). It refuses
        nothing: fault rules come first (CONTRACT); create_pet refuses a bad or held key."""
        try:
            key = idempotency_key(scope)
            release = None if key is None else self.in_flight.hold(key)
        except (Refused, IdempotencyConflict):
            return None
        scope[_KEY] = key  # None: none sent
        return release

    async def create_pet(self, scope: Scope, receive: Receive) -> Response:
        try:
            if _KEY in scope:  # held by hold_key, or none sent
                key = scope[_KEY]
            elif (key := idempotency_key(scope)) is not None and key in self.in_flight:
                raise IdempotencyConflict(key)  # held by another: whatever this one sends
            require_json(scope)
        except (Refused, IdempotencyConflict):
            if self.journaled:  # what it sent, as an injected fault's create: for the journal
                await read_body_start(scope, receive, self.journaled, self.max_body)
            raise
        new_pet = decode_new_pet(await read_body(scope, receive, self.max_body))
        pet, replayed = await self.store.add(new_pet, key)  # its 409 or 422: Endpoint's
        location = f"{scope.get('root_path', '')}{PETS_PATH}/{pet.id}"
        headers = [(b"location", location.encode())]
        if replayed:
            headers.append((b"idempotent-replayed", b"true"))
        return JSONResponse(encoder.encode(pet), 201, headers)

    async def get_pet(self, scope: Scope, receive: Receive) -> Response:
        text: str = scope["path_params"]["petId"]
        pet_id = integer(text)
        if pet_id is None or not INT64_MIN <= pet_id <= INT64_MAX:
            raise invalid(f"petId must be an integer from {INT64_MIN} to {INT64_MAX}")
        pet = await self.store.get(pet_id)
        if pet is None:
            raise Refused(404, ErrorCode.NOT_FOUND, f"No pet has id {pet_id}")
        return JSONResponse(encoder.encode(pet))

    async def openapi(self, scope: Scope, receive: Receive) -> Response:
        return JSONResponse(self.document(scope))

    async def healthz(self, scope: Scope, receive: Receive) -> Response:
        return JSONResponse(b'{"status":"ok"}')

    async def readyz(self, scope: Scope, receive: Receive) -> Response:
        if self.health.stopping:  # the cause in its words, as the store's below
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, "Shutting down")
        if not self.health.started:
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, "Not serving requests yet")
        if (problem := self.store.unwritable) is not None:  # the store's own words
            return error_response(503, ErrorCode.STORAGE_UNAVAILABLE, problem)
        return JSONResponse(b'{"status":"ready"}')


# --------------------------------------------------------------------------- the app

OPENAPI_PATH: Final = f"{API_PREFIX}/openapi.json"
METRICS_PATH: Final = "/metrics"
API_AREA: Final = Area(API_PREFIX, BEARER_REALM, "API key", frozenset({OPENAPI_PATH}))
ADMIN_AREA: Final = Area(ADMIN_PREFIX, ADMIN_REALM, "admin key", frozenset({ADMIN_OPENAPI_PATH}))


@dataclasses.dataclass
class Petstore:
    """The ASGI app: the middleware around the router, with a handle on both for tests and main."""

    app: ASGIApp
    router: Router
    health: Health
    access_log: AccessLog
    plane: ControlPlane | None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def create_app(
    settings: Settings,
    store: PetStore,
    *,
    access_log: TextIO | None = None,
    chance: Callable[[], float] = random.random,
) -> Petstore:
    """Routes, then (outermost last) auth, CORS, the access log (request ids, the last-resort
    500, the journal, the metrics' counts), root path. With metrics on: GET /metrics. With an
    admin key only: the test-control plane's routes, its journal, admin keys beside the API
    keys, and faults at the three operations' endpoints; `chance`: the rules' random draw."""
    if not settings.api_keys:
        raise ValueError("settings.api_keys is empty: call with_key() first")
    health = Health()
    plane = None
    if settings.admin_keys:
        journal = None
        if settings.journal_size:
            journal = Journal(settings.journal_size, settings.secrets)
        journaled = journal.body_kept if journal else 0
        plane = ControlPlane(store, journal, Faults(chance, journaled, settings.max_body))
    handlers = PetRoutes(store, settings, health, plane.faults.journaled if plane else 0)
    deprecation = {
        "Deprecation": DEPRECATION,
        "Sunset": SUNSET,
        "Link": f'<{{root_path}}{PETS_PATH}>; rel="successor-version"',
    }

    @contextlib.asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        await store.open()
        # `log` is the AccessLog layer, made below around the others, and `counts` its counts.
        tasks = []
        if access_log:
            tasks.append(asyncio.create_task(log.drain_every(LOG_EVERY)))
        if counts is not None:
            tasks.append(asyncio.create_task(counts.fold_every(FOLD_EVERY)))
        health.started = True
        adopt_server(health.stop)  # under `uvicorn app:app`; `python app.py`'s stops so itself
        try:
            yield
        finally:
            health.stop()
            for task in tasks:
                task.cancel()
            # Cancelled, the drain puts back the entries it had not formatted: flush after it.
            await asyncio.gather(*tasks, return_exceptions=True)
            await store.close()
            log.flush()

    async def scrape(scope: Scope, receive: Receive) -> Response:
        # `metrics` is made below, once the router it asks for templates exists.
        return BytesResponse(metrics.exposition(), CONTENT_TYPE_LATEST)

    interceptor = plane.faults if plane else None
    routes = [
        Route(
            PETS_PATH + "/{petId}",
            Endpoint(
                {"GET": handlers.get_pet},
                deprecation,
                operations={"GET": "getPet"},
                interceptor=interceptor,
            ),
        ),
        Route(
            PETS_PATH,
            Endpoint(
                {"GET": handlers.list_pets, "POST": handlers.create_pet},
                operations={"GET": "listPets", "POST": "createPet"},
                interceptor=interceptor,
                holds={"POST": handlers.hold_key},
            ),
        ),
        Route(OPENAPI_PATH, Endpoint({"GET": handlers.openapi})),
        Route("/healthz", Endpoint({"GET": handlers.healthz})),
        Route("/readyz", Endpoint({"GET": handlers.readyz})),
        *([Route(METRICS_PATH, Endpoint({"GET": scrape}))] if settings.metrics else ()),
        *Docs(OPENAPI_PATH).routes(),
        *(plane.routes() if plane else ()),
    ]
    router = IndexedRouter(routes, lifespan=lifespan)
    credentials = [Credentials(settings.api_keys, API_AREA, router.route_headers)]
    if plane:
        credentials.append(Credentials(settings.admin_keys, ADMIN_AREA))
    app: ASGIApp = BearerAuth(router, credentials)
    if settings.cors_origins:
        app = Cors(app, settings.cors_origins)
    counts = None
    if settings.metrics:
        counts = RequestCounts(router.template)
        metrics = Metrics(counts, store, store if isinstance(store, FileStore) else None)
    journal = plane.journal if plane else None
    app = log = AccessLog(
        app,
        access_log,
        journal,
        counts,
        json_lines=settings.log_format == "json",
        secrets=settings.secrets,
        prefer=plane is not None,
        forwarded=settings.forwarded,
    )
    if settings.root_path:
        app = RootPath(app, settings.root_path)
    return Petstore(app, router, health, log, plane)


def build(settings: Settings) -> Petstore:
    """The app for these settings, over the store they ask for; SettingsError if it can't be."""
    return create_app(settings, open_store(settings), access_log=access_log_stream(settings))


def main(argv: Sequence[str] | None = None) -> int:
    """`python app.py [flags]`: serve until SIGTERM, Ctrl-C or SIGHUP (`python app.py
    healthcheck` is answered above, before the imports)."""
    code = _start_and_serve(sys.argv[1:] if argv is None else argv)
    # Ctrl-C: the same stop as SIGTERM's, then the shell's code for a SIGINT (the server raised
    # the signal again once done, and note_stop, back by then, noted it: no traceback).
    return 130 if code == 0 and signal.SIGINT in stops_asked else code


def _start_and_serve(argv: Sequence[str]) -> int:
    try:
        if sys.stdout is None:  # closed by whoever started us: Python could not open it
            raise SettingsError(
                "stdout is closed: start with it open (>/dev/null drops the access log)"
            )
        settings, key_line = with_key(load_settings(argv, os.environ))
    except SettingsError as error:  # in the log format asked for, if that one was readable
        refuse_start(str(error), None, os.environ, argv)
        return 2
    start_logging(settings, os.environ)  # with the key made just now, which Redact keeps out
    try:
        sock = bound_socket(settings)  # before the store loads: an address in use says so first
        app = build(settings)
    except SettingsError as error:  # the data file, the seed, the address
        refuse_start(str(error), settings, os.environ)
        return 2

    def announce(ready_line: str) -> None:  # a generated key only once the start succeeded
        if not app.access_log.announce(key_line + ready_line) and key_line:
            logging.getLogger("petstore").error(
                "the generated API key could not be shown (stdout can't be written), so no"
                " request can be authorized: configure a key (--api-key, PETSTORE_API_KEYS)"
            )

    # The stack itself: Petstore's own call is one await more a request.
    serve(
        app.app,
        settings,
        app.health.stop,
        note_refusal=app.access_log.note_refusal,
        sock=sock,
        announce=announce,
        stops_asked=stops_asked,
    )
    return 0


def __getattr__(name: str) -> Any:
    """`uvicorn app:app`: the app built from PETSTORE_* variables, on first use only, and the
    HTTP protocol of `python app.py` for the same settings (their client timeout, `drop`, the
    server's 400s in the access log), put in uvicorn's (adopt_protocol), or named by `--http
    app:StallGuard` (which uvicorn imports first)."""
    if name not in ("app", "StallGuard"):
        raise AttributeError(name)
    settings, config = None, uvicorn_config()
    try:
        settings, key_line = with_key(load_settings([], os.environ))
        # uvicorn's proxy headers, on unless --no-proxy-headers, take X-Forwarded-For's address
        # (with no Config found, another server's may: assumed to).
        settings = dataclasses.replace(settings, forwarded=config is None or config.proxy_headers)
        # uvicorn set up its loggers before importing us: in JSON, they are ours to redo.
        start_logging(settings, os.environ, uvicorn_too=settings.log_format == "json")
        check_workers(settings, generated_key=bool(key_line))
        warn_of_unread(os.environ)
        app = build(settings)
        if key_line:  # uvicorn listens only once we are built: said before that, once
            app.access_log.announce(key_line)
    except SettingsError as error:
        refuse_start(str(error), settings, os.environ)  # None: read for its format
        # uvicorn's own code for a start that failed: its --workers supervisor then stops
        # instead of starting the worker again and again.
        raise SystemExit(STARTUP_FAILURE) from None
    protocol = http_protocol(settings, app.access_log.note_refusal)
    if config is not None:
        adopt_protocol(config, protocol)
    globals().update(app=app, StallGuard=protocol)
    return globals()[name]


if __name__ == "__main__":
    sys.exit(main())
