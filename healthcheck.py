"""`python app.py healthcheck`: whether the service answers GET /healthz with 200 in time."""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import sys
from typing import Final

TIMEOUT: Final = 2.0  # seconds for the whole answer
HOST: Final = "127.0.0.1"  # the service's defaults (a test holds them to the settings')
PORT: Final = 8000
# A service listening on every address is asked on the loopback.
LOOPBACK: Final = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - maps away from them


def main(argv: list[str]) -> int:
    """0 when /healthz at --host and --port (PETSTORE_HOST, PETSTORE_PORT) answers 200 within
    TIMEOUT, else 1 and one line on stderr. The standard library only: it runs every few seconds."""
    parser = argparse.ArgumentParser(prog="python app.py healthcheck", exit_on_error=False)
    parser.add_argument("--host", default=os.environ.get("PETSTORE_HOST") or HOST)
    parser.add_argument("--port", type=int, default=os.environ.get("PETSTORE_PORT") or PORT)
    try:
        args, _ = parser.parse_known_args(argv)  # the service's other flags: taken and ignored
    except argparse.ArgumentError as error:
        print(f"petstore healthcheck: {error}", file=sys.stderr)
        return 1
    host = args.host.removeprefix("[").removesuffix("]")  # as the ready line writes an IPv6 one
    host = LOOPBACK.get(host, host)
    url = f"http://{f'[{host}]' if ':' in host else host}:{args.port}/healthz"
    connection = http.client.HTTPConnection(host, args.port, timeout=TIMEOUT)
    previous = signal.signal(signal.SIGALRM, _too_slow)
    # The whole exchange's limit: a timeout alone is each read's, which a trickle passes.
    signal.setitimer(signal.ITIMER_REAL, TIMEOUT)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
    except (OSError, http.client.HTTPException) as error:
        # One line, whatever answered: a server that speaks no HTTP sends its own line ends.
        reason = " ".join(str(error).split()) or type(error).__name__
        print(f"petstore healthcheck: {url}: {reason}", file=sys.stderr)
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        connection.close()
    if response.status != 200:
        print(f"petstore healthcheck: {url} answered {response.status}", file=sys.stderr)
        return 1
    return 0


def _too_slow(signum: int, frame: object) -> None:
    raise TimeoutError(f"no whole answer within {TIMEOUT:g} s")
