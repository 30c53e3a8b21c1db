"""Running under uvicorn: the server, the ready line, readiness off at shutdown.

The server runs StallGuard (protocol.py); the logs are logs.py's, `healthcheck` is
healthcheck.py's. Under `uvicorn app:app`, uvicorn runs the server: adopt_protocol gives it
StallGuard, check_workers and warn_of_unread say what it does that our own start would not."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType
from typing import Any, Final

import uvicorn
from starlette.types import ASGIApp

from logs import logging_config, wait_for_outlets
from protocol import NoteRefusal, http_protocol
from schemas import API_PREFIX
from settings import Settings, SettingsError, bracketed, is_service_link

logger = logging.getLogger("petstore")


# How long a forced stop waits for the requests it cut off to send their 500.
_CUT_OFF_SECONDS: Final = 1.0


class _Server(uvicorn.Server):
    """uvicorn's server that says where it listens once it does, and, as soon as a stop is
    asked (SIGTERM, SIGINT, and SIGHUP too: a sidecar started from a terminal that closed),
    turns /readyz to 503 and takes no new connection."""

    def __init__(
        self,
        config: uvicorn.Config,
        on_exit: Callable[[], None],
        announce: Callable[[str], None],
        stops_asked: Sequence[int],
    ) -> None:
        super().__init__(config)
        self.on_exit = on_exit
        self.announce = announce
        self.stops_asked = stops_asked
        self.stopped_by: int | None = None  # the first stop's signal
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.stopped_by is not None:  # a stop came during the start: nothing is served
            self._stopped_before_serving()
            return
        await super().startup(sockets)  # the lifespan (the store loaded), then the listening socket
        self.loop = asyncio.get_running_loop()  # from now on a stop closes the listeners at once
        if self.started and self.stopped_by is not None:  # one came during the lifespan's start
            stop_taking_requests(self)
            self._stopped_before_serving()
            return
        if self.started and sockets is not None:  # uvicorn says where only of what it bound
            self._log_started_message(sockets)
        if self.started:
            # Before any request can be taken (nothing awaits between here and the loop), so
            # before any access-log line: a harness that started us with --port 0 reads it.
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            self.announce(f"petstore: ready at http://{bracketed(host)}:{port}{API_PREFIX}\n")

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if self.force_exit and not self.lifespan.shutdown_event.is_set():
            # Ctrl-C twice: uvicorn stops waiting for the requests in flight, and skipped the
            # lifespan's end too, whose task asyncio.run then cancelled with a traceback. The
            # requests are cut off now (each answers its 500, as at the grace's end), and then
            # the store is closed and the access log written, their lines in it.
            tasks = list(self.server_state.tasks)
            for task in tasks:
                task.cancel(msg="Task cancelled, the shutdown forced")
            if tasks:
                await asyncio.wait(tasks, timeout=_CUT_OFF_SECONDS)
            await self.lifespan.shutdown()

    def _stopped_before_serving(self) -> None:
        name = signal.Signals(self.stopped_by or signal.SIGTERM).name
        logger.info("stopped before serving: a %s came during the start", name)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.stopped_by is None:
            self.stopped_by = sig
        self.on_exit()
        super().handle_exit(sig, frame)
        # Soon, not here: a signal's handler runs between any two bytecodes of the loop's work.
        if self.loop is not None:
            self.loop.call_soon_threadsafe(stop_taking_requests, self)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's (SIGTERM, SIGINT) and SIGHUP, acting at once on the signals that came
        during the start; and the logs' last lines are written (their Outlets' threads) before
        it raises the signal it caught again, which ends the process (`python app.py` notes
        it: app.py's handler is back by then, and the process exits 0, or 130 for a SIGINT)."""
        # Signals are taken in the main thread only, and an ignored SIGHUP (`nohup`) stays so.
        main = threading.current_thread() is threading.main_thread()
        take = main and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN
        with super().capture_signals():
            hangup = signal.signal(signal.SIGHUP, self.handle_exit) if take else None
            try:
                for signum in self.stops_asked:
                    self.handle_exit(signum, None)
                yield
                wait_for_outlets()
            finally:  # back before uvicorn raises the signals again, as it puts back its own
                if hangup is not None:
                    signal.signal(signal.SIGHUP, hangup)


def stop_taking_requests(server: uvicorn.Server) -> None:
    """The first steps of uvicorn's shutdown, at once rather than at its next check (every
    0.1 s), in which new connections were taken and served (a create's 201) while /readyz said
    503: the listening sockets closed (none yet: a stop during the lifespan's start), and each
    connection to end after the answer it is giving (an idle one now). uvicorn's shutdown does
    them again: nothing more."""
    for listener in getattr(server, "servers", ()):
        listener.close()
    for connection in list(server.server_state.connections):
        connection.shutdown()


def adopt_server(on_exit: Callable[[], None]) -> None:
    """Under `uvicorn app:app` (called as the lifespan starts), make uvicorn's server stop as
    `python app.py`'s does. A SIGTERM or SIGINT turns /readyz to 503 (`on_exit`) and stops
    taking requests at once: uvicorn acts on them at its next check, and took and served new
    connections meanwhile, /readyz 200 among them. And the logs' last lines are written before
    it raises the signal again, which ends the process at once: from the end of its shutdown
    on, each write of theirs waits for its text (wait_for_outlets). The server is found as the
    `self` of its signal handlers, which it installs before the lifespan starts and takes back
    when it ends. Elsewhere (`python app.py`, whose server does all this itself; a test's
    transport; another server) nothing is changed."""
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    if not isinstance(server, uvicorn.Server) or isinstance(server, _Server):
        return
    loop = asyncio.get_running_loop()

    def handle_exit(signum: int, frame: FrameType | None) -> None:
        on_exit()
        server.handle_exit(signum, frame)
        loop.call_soon_threadsafe(stop_taking_requests, server)

    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) == server.handle_exit:
            signal.signal(signum, handle_exit)
    shutdown = server.shutdown

    async def shutdown_written_out(sockets: list[socket.socket] | None = None) -> None:
        await shutdown(sockets)
        wait_for_outlets()

    server.shutdown = shutdown_written_out  # type: ignore[method-assign]


def bound_socket(settings: Settings) -> socket.socket:
    """The socket the service will listen on, bound now, before the store loads: an address
    it can't have (a port in use, a host it doesn't have or can't resolve) stops the start
    with one line, as a bad setting does (uvicorn loaded the store first, then wrote six lines
    and exited 3). A host in brackets (`[::1]`, as the ready line writes it) is taken without
    them; a name at its first address (uvicorn bound `localhost` twice, `--port 0` giving each
    its own port)."""
    host = settings.host
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as error:
        raise SettingsError(f"cannot listen on {host}: {error.strerror or error}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn's own
        sock.bind(address)
    except OSError as error:
        sock.close()
        raise SettingsError(
            f"cannot listen on {bracketed(host)}:{settings.port}: {error.strerror or error}"
        ) from None
    return sock


def serve(  # noqa: PLR0913 - the app, its settings, and what the server tells it or asks of it
    app: ASGIApp,
    settings: Settings,
    on_exit: Callable[[], None],
    *,
    note_refusal: NoteRefusal,
    sock: socket.socket,
    announce: Callable[[str], None],
    stops_asked: Sequence[int],
) -> None:
    """Serve `app` until SIGTERM, Ctrl-C or SIGHUP; `on_exit` runs as soon as one arrives.
    `note_refusal` notes each of the server's own 400s and gives its id
    (AccessLog.note_refusal); `sock` is bound_socket()'s; `announce` writes the ready line
    (AccessLog.announce); `stops_asked`, the signals that came during the start (stops.py notes
    them): there, nothing is served."""
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,  # ours is cheaper and keeps the duration
        # uvicorn's default trusts the loopback's X-Forwarded-For: every request from there
        # had its headers looked through, a layer more (3 % of a getPet's instructions).
        proxy_headers=settings.forwarded,
        log_config=logging_config(settings),  # so uvicorn installs no text handlers of its own
        http=http_protocol(settings, note_refusal),
        lifespan="on",
        timeout_graceful_shutdown=5,
        server_header=False,
        ws="none",  # the service speaks no WebSocket: an Upgrade is ignored (RFC 9110, 7.8)
    )
    server = _Server(config, on_exit, announce, stops_asked)
    server.run(sockets=[sock])


def uvicorn_config() -> uvicorn.Config | None:
    """Under `uvicorn app:app`, the uvicorn Config importing the app: no ASGI message says how
    uvicorn serves it, so it is found up the stack (the `self` of the method importing it).
    None elsewhere (`uvicorn.run` of an app imported first, another server)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if isinstance(config := frame.f_locals.get("self"), uvicorn.Config):
            return config
        frame = frame.f_back
    return None


def adopt_protocol(config: uvicorn.Config, protocol: type[asyncio.Protocol]) -> None:
    """Make `protocol` (StallGuard for the settings) the HTTP protocol of the uvicorn Config
    importing the app, if its --http was left to uvicorn (auto or httptools): the server's own
    400s Error bodies with an id, the client timeout, `drop`, as under `python app.py`.
    --http h11, or a protocol named, is kept."""
    if config.http in ("auto", "httptools"):
        # Both: uvicorn's run() imports the app before Config.load() reads --http, and a
        # worker (--workers, --reload) after it made the protocol's class.
        config.http = config.http_protocol_class = protocol


def warn_of_unread(environ: Mapping[str, str]) -> None:
    """Under `uvicorn app:app`, warn of what it leaves unread: PETSTORE_HOST and PETSTORE_PORT
    are uvicorn's --host and --port to it (a PETSTORE_HOST of 0.0.0.0 was ignored in silence)."""
    for variable, flag in (("PETSTORE_HOST", "host"), ("PETSTORE_PORT", "port")):
        if variable in environ and not is_service_link(variable, environ):
            logger.warning(
                "%s is not read under `uvicorn app:app`: its --%s says where it listens",
                variable,
                flag,
            )


def check_workers(settings: Settings, *, generated_key: bool) -> None:
    """Under `uvicorn app:app`, refuse a worker that has siblings (--workers) where each would
    go its own way: with a key it made itself, with the test-control plane (a fault rule, the
    journal, a reset would reach the worker a request happened to reach), over pets in
    memory."""
    if multiprocessing.parent_process() is None or _reloading():
        return
    if generated_key:
        raise SettingsError(
            "several workers would each make their own key: configure one (PETSTORE_API_KEYS)"
        )
    if settings.admin_keys:
        raise SettingsError(
            "several workers would each keep their own fault rules and journal: run one worker"
            " with an admin key (or replicas of one worker each, and a plane for each)"
        )
    if settings.data is None and settings.database is None:
        raise SettingsError(
            "several workers would each keep their own in-memory pets: run one worker"
        )


def _reloading() -> bool:
    """Whether uvicorn runs us under --reload: one process at a time, started again on a
    change, where pets in memory are fine. Its worker can't tell that from --workers but by
    the command line it inherits (multiprocessing's spawn passes it on) or uvicorn's variable."""
    # Only --reload itself: --reload-dir and the like reload nothing without it.
    variable = os.environ.get("UVICORN_RELOAD", "").lower()
    return "--reload" in sys.argv or variable in ("1", "true", "yes", "on")
