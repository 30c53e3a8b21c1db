"""`python app.py healthcheck`: whether the service the settings describe answers /healthz.

With `--ready`, /readyz instead. The image's HEALTHCHECK runs it every 10 s, so it imports the
standard library and settings.py (with flags.py, database_url.py and redaction.py) only
(app.py runs it before its own imports): importing the whole service each time cost more CPU
than the check, and under `--cpus 0.1` more than the check's 3 s (README: Running in a
container)."""

from __future__ import annotations

import http.client
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, Final

from flags import HEALTHCHECK_SECONDS, HEALTHCHECK_USAGE
from settings import Settings, SettingsError, bracketed, load_settings

# Where `healthcheck` asks when the service listens on every address.
_LOOPBACK: Final = {"0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - maps away from them


_USAGE: Final = f"""\
usage: {HEALTHCHECK_USAGE}

Exit 0 when the service at HOST:PORT (PETSTORE_HOST, PETSTORE_PORT; 0.0.0.0 and :: ask the
loopback) answers /healthz with 200 within {HEALTHCHECK_SECONDS:g} s, else 1 with one line
on stderr. --ready asks /readyz instead (a database the service can reach); the other flags
are read and ignored."""


def _too_slow(signum: int, frame: Any) -> None:
    raise TimeoutError(f"no whole answer within {HEALTHCHECK_SECONDS:g} s")


def main(argv: Sequence[str]) -> int:
    """`python app.py healthcheck [--ready] [flags]`: the flags and variables of the service, of
    which the host and the port are read. `--ready` asks /readyz instead: a compose file's
    `service_healthy` then waits for a database the service can reach."""
    if "-h" in argv or "--help" in argv:
        print(_USAGE)
        return 0
    ready = "--ready" in argv
    try:
        settings = load_settings([a for a in argv if a != "--ready"], os.environ, address_only=True)
    except SettingsError as error:
        print(f"petstore healthcheck: {error}", file=sys.stderr)
        return 1
    if settings.port == 0:  # the system's pick, which only the ready line tells
        print(
            "petstore healthcheck: port 0 names no port to ask: give the service a fixed one"
            " (PETSTORE_PORT, --port) for the check",
            file=sys.stderr,
        )
        return 1
    return healthcheck(settings, "/readyz" if ready else "/healthz")


def healthcheck(settings: Settings, path: str = "/healthz") -> int:
    """0 when `path` answers 200 within HEALTHCHECK_SECONDS, else 1 and one line on stderr. No
    curl in a slim image, and no HTTP proxy consulted (http.client uses none)."""
    host = _LOOPBACK.get(settings.host, settings.host)
    url = f"http://{bracketed(host)}:{settings.port}{path}"
    # The alarm is the whole check's limit (with a timeout alone, each read's, an answer sent
    # a byte at a time passed after 19 s); the timeout, longer, is there should it not ring.
    connection = http.client.HTTPConnection(host, settings.port, timeout=HEALTHCHECK_SECONDS + 1)
    previous = signal.signal(signal.SIGALRM, _too_slow)
    signal.setitimer(signal.ITIMER_REAL, HEALTHCHECK_SECONDS)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()  # the whole answer, its body too, within the time
        status = response.status
    except (OSError, http.client.HTTPException) as error:
        # One line, whatever answered: a server that is no HTTP one sends its own line ends.
        reason = " ".join(str(error).split()) or type(error).__name__
        print(f"petstore healthcheck: {url}: {reason}", file=sys.stderr)
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        connection.close()
    if status != 200:
        print(f"petstore healthcheck: {url} answered {status}", file=sys.stderr)
        return 1
    return 0
