"""Serving under uvicorn: the listening socket, the ready line, and readiness off at a stop."""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from observability import logging_config
from protocol import HttpProtocol
from schemas import API_PREFIX
from settings import Settings, SettingsError


class Server(uvicorn.Server):
    """uvicorn's server that says where it listens once it does, and calls `on_stop` as soon as
    a stop is asked (SIGTERM, Ctrl-C), so that /readyz answers 503 from then on."""

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None], first: str) -> None:
        super().__init__(config)
        self.on_stop, self.first = on_stop, first

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # before any request is taken, so before any access-log line
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            host = f"[{host}]" if ":" in host else host
            sys.stdout.write(f"{self.first}petstore: ready at http://{host}:{port}{API_PREFIX}\n")
            sys.stdout.flush()

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.on_stop()
        super().handle_exit(sig, frame)


def bound_socket(settings: Settings) -> socket.socket:
    """The listening socket, bound before the store loads: an address in use says so first."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            settings.host, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as error:
        where = f"{settings.host}:{settings.port}"
        raise SettingsError(f"cannot listen on {where}: {error.strerror or error}") from None
    return sock


def serve(
    app: ASGIApp, settings: Settings, sock: socket.socket, on_stop: Callable[[], None], first: str
) -> None:
    """Serve `app` on `sock` until SIGTERM or Ctrl-C; `first` goes out before the ready line."""
    protocol = type("Protocol", (HttpProtocol,), {"client_timeout": settings.client_timeout})
    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        log_config=logging_config(settings),
        access_log=False,  # the service writes its own
        http=protocol,
        lifespan="on",
        timeout_graceful_shutdown=5,  # within the 10 s container engines wait after SIGTERM
        server_header=False,
        # X-Forwarded-For is read only from the proxies FORWARDED_ALLOW_IPS names, if set.
        proxy_headers="FORWARDED_ALLOW_IPS" in os.environ,
    )
    # Ctrl-C ends the process as its signal, as SIGTERM does: no KeyboardInterrupt traceback.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    Server(config, on_stop, first).run(sockets=[sock])
