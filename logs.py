"""The logs: one logging configuration (text or JSON lines), Redact, and Outlet.

Redact keeps every secret out of every line; Outlet writes a stream from a thread of its own,
so that a reader who stops reading never stops the service."""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import logging.config
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Final, TextIO

import uvicorn.config
from uvicorn.config import LOG_LEVELS

from redaction import longest_first, redact, redact_encoded
from schemas import encoder, rfc3339
from settings import Settings, cautions, log_format_asked

logger = logging.getLogger("petstore")


# Control characters as escapes, in a line given decoded.
_UNPRINTABLE: Final = {code: f"\\x{code:02x}" for code in (*range(32), 127)}


class Redact(logging.Filter):
    """Every secret of the configuration (API and admin keys, the database's password) out of
    every log record, whoever writes it, as `[redacted]`: a client can put a key in a path or a
    query, and lines of ours (an error names its request's path) and uvicorn's (at trace, each
    request's scope; under `uvicorn app:app`, its access log) would carry it. On the handlers,
    so that it sees the records of every logger; the access log's own lines are redacted where
    they are made (accesslog.py)."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        super().__init__()
        self.secrets = longest_first(secrets)

    def redact(self, text: str) -> str:
        """`text` with each secret in it redacted, as written or percent-encoded: a client may
        encode any character of a key, and uvicorn's access line and trace lines keep a query
        as it was sent (the line is then given decoded, its secrets redacted)."""
        text = redact(text, self.secrets)
        if "%" in text or "+" in text:
            for decode in (urllib.parse.unquote, urllib.parse.unquote_plus):
                redacted = redact_encoded(text, self.secrets, decode)
                if redacted != text:  # decoded: what else the client encoded (`%0A`, `%1B`)
                    text = redacted.translate(_UNPRINTABLE)  # writes no line or escape of its own
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        if isinstance(record.args, tuple):  # kept a tuple: uvicorn's access formatter reads it
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in record.args)
        message = record.getMessage()
        redacted = self.redact(message)  # in a dict, bytes, ...
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self.redact(logging.Formatter().formatException(record.exc_info))
        return True


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object: time (RFC 3339, UTC), level, logger, message, and the
    traceback as text under exc_info when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": rfc3339(int(record.created * 1e9)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:  # its text as Redact left it, when it did
            line["exc_info"] = record.exc_text or self.formatException(record.exc_info)
        try:
            return encoder.encode(line).decode()
        except UnicodeEncodeError:  # a lone surrogate: a name that is not UTF-8, as Python reads it
            return encoder.encode(
                {
                    name: text.encode(errors="backslashreplace").decode()
                    for name, text in line.items()
                }
            ).decode()


class Outlet:
    """A text stream whose writes never wait for its reader: each goes into a queue that a
    thread of its own writes out (and flushes) as fast as the reader takes it. Written
    directly, a reader that stopped reading (a harness that read the ready line and no more:
    a pipe holds 64 KiB) blocked the event loop in its next write, and the service stopped
    answering, SIGTERM included. Past `limit` characters waiting, text is dropped and counted;
    a warning says how many lines once the reader reads again. A failed write (the reader is
    gone) is raised by the next `write`, when `raise_errors` (the access log stops then); else
    everything after it is dropped. At exit it waits a little for what is queued, and once the
    exit has begun (wait_for_outlets), each write waits for its text to be written, within the
    exit's budget: uvicorn ends the process by raising the signal it caught again, and logs
    its last lines just before."""

    def __init__(self, stream: TextIO, name: str, *, raise_errors: bool = False) -> None:
        self.stream = stream
        self.name = name
        self.raise_errors = raise_errors
        self.limit = OUTLET_LIMIT
        self._queued: list[str] = []
        self._size = 0  # characters queued
        self._dropped = 0  # lines dropped since the last warning
        self._writing = False
        self._error: Exception | None = None
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"petstore-{name}", daemon=True)
        self._thread.start()
        _outlets.append(self)

    def write(self, text: str) -> int:
        with self._changed:
            if self._error is not None:
                if self.raise_errors:
                    raise self._error
            elif self._size + len(text) > self.limit:
                self._dropped += text.count("\n") or 1
            else:
                self._queued.append(text)
                self._size += len(text)
                self._changed.notify()
        # Not its own thread's (its warning of dropped lines): it would wait for itself.
        if _exit_wait_ends is not None and threading.current_thread() is not self._thread:
            self.wait(_exit_wait_ends - time.monotonic())
        return len(text)

    def flush(self) -> None:
        """Nothing to do: the thread writes and flushes each time as soon as it can."""

    def wait(self, seconds: float) -> bool:
        """Wait until all that is queued is written, `seconds` at most; whether it was."""
        deadline = time.monotonic() + seconds
        with self._changed:
            while (self._queued or self._writing) and self._error is None:
                if not self._changed.wait(deadline - time.monotonic()):
                    return False
        return True

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._queued:
                    self._changed.wait()
                text, self._queued, self._size = "".join(self._queued), [], 0
                dropped, self._dropped = self._dropped, 0
                self._writing = True
            try:
                self.stream.write(text)
                self.stream.flush()
            except (OSError, ValueError) as error:  # the reader is gone, or the stream closed
                with self._changed:
                    self._error, self._writing = error, False
                    self._changed.notify_all()
                return
            with self._changed:
                self._writing = False
                self._changed.notify_all()
            if dropped:
                logger.warning("%s: %d lines dropped while it was not read", self.name, dropped)


# How much text an Outlet keeps waiting for its reader (about two seconds of access-log lines
# at 30,000 requests a second), and how long the process waits at exit for it to be written.
OUTLET_LIMIT: Final = 4 << 20
EXIT_WAIT_SECONDS: Final = 2.0
_outlets: list[Outlet] = []
_exit_wait_ends: float | None = None  # when the exit stops waiting (wait_for_outlets)
_handler_outlets: dict[int, Outlet] = {}


def unblocked_handler(stream: TextIO) -> logging.StreamHandler[Outlet]:
    """A StreamHandler that writes to `stream` through an Outlet (one per stream, kept: the
    logging configuration is applied twice, by us and by uvicorn)."""
    outlet = _handler_outlets.get(id(stream))
    if outlet is None:
        name = getattr(stream, "name", "a log stream")
        outlet = _handler_outlets[id(stream)] = Outlet(stream, name)
    return logging.StreamHandler(outlet)


@atexit.register
def wait_for_outlets() -> None:
    """Let every Outlet write what it holds, EXIT_WAIT_SECONDS at most in all, over every
    call and every write after the first call. The exit waits before uvicorn raises SIGTERM
    again, which ends the process at once (server.py: under `python app.py` once its server
    is done; under `uvicorn app:app` from the end of its shutdown on, each write), and at
    exit; a reader that is gone is waited for once."""
    global _exit_wait_ends  # noqa: PLW0603 - one budget for the process's exit
    if _exit_wait_ends is None:
        _exit_wait_ends = time.monotonic() + EXIT_WAIT_SECONDS
    for outlet in _outlets:
        outlet.wait(_exit_wait_ends - time.monotonic())


def logging_config(settings: Settings) -> dict[str, Any]:
    """The one logging configuration (logging.config.dictConfig's) of the service's logger and
    uvicorn's, all on stderr. text: uvicorn's own set-up, and ours beside it, as they always
    were. json: one handler, JsonFormatter, for both (uvicorn's access log too, which
    `python app.py` turns off: ours is cheaper)."""
    ours = {"level": LOG_LEVELS[settings.log_level], "propagate": False}
    redact_filter = {"()": Redact, "secrets": settings.secrets}
    if settings.log_format == "text":
        config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
        config["formatters"]["petstore"] = {"format": "%(levelname)-9s %(name)s: %(message)s"}
        config["handlers"]["petstore"] = {
            "class": "logging.StreamHandler",
            "formatter": "petstore",
            "stream": "ext://sys.stderr",
        }
        config["filters"] = {"redact": redact_filter}
        for handler in config["handlers"].values():
            handler["filters"] = ["redact"]
            handler["()"] = unblocked_handler
            del handler["class"]
        config["loggers"]["petstore"] = {"handlers": ["petstore"], **ours}
        config["root"] = {"handlers": ["petstore"], "level": "WARNING"}
        return config
    uvicorn_loggers = {"handlers": ["json"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "filters": {"redact": redact_filter},
        "handlers": {
            "json": {
                "()": unblocked_handler,
                "formatter": "json",
                "stream": "ext://sys.stderr",
                "filters": ["redact"],
            }
        },
        "loggers": {
            "petstore": {"handlers": ["json"], **ours},
            # Levels as uvicorn's own set-up has them; uvicorn.Config sets its --log-level.
            "uvicorn": {**uvicorn_loggers, "level": "INFO"},
            "uvicorn.error": {"level": "INFO"},  # to "uvicorn"'s handler
            "uvicorn.access": uvicorn_loggers,
        },
        # What other libraries log (asyncio, asyncpg) and Python's warnings (captured).
        "root": {"handlers": ["json"], "level": "WARNING"},
    }


def configure_logging(settings: Settings, *, uvicorn_too: bool = True) -> None:
    """Apply logging_config(settings). Without `uvicorn_too` only the service's logger is set
    up: under `uvicorn app:app` in text, uvicorn's loggers keep what uvicorn gave them."""
    config = logging_config(settings)
    if not uvicorn_too:
        config["loggers"] = {"petstore": config["loggers"]["petstore"]}
    # Under `uvicorn app:app`, the levels its --log-level gave its loggers before the import.
    levels = {name: logging.getLogger(name).level for name in ("uvicorn", "uvicorn.error")}
    logging.config.dictConfig(config)
    for name, level in levels.items():
        if level != logging.NOTSET:
            logging.getLogger(name).setLevel(level)
    logging.captureWarnings(True)  # a library's warnings.warn (asyncpg's on a loose .pgpass)
    if not uvicorn_too:  # uvicorn's handlers as uvicorn made them, our filter added
        redact_filter = Redact(settings.secrets)
        for name in ("uvicorn", "uvicorn.access"):
            for handler in logging.getLogger(name).handlers:
                handler.addFilter(redact_filter)


def start_logging(
    settings: Settings, environ: Mapping[str, str], *, uvicorn_too: bool = True
) -> None:
    """The logs set up (configure_logging), and their first lines: the settings' cautions."""
    configure_logging(settings, uvicorn_too=uvicorn_too)
    for caution in cautions(settings, environ):
        logger.warning("%s", caution)


def refuse_start(
    reason: str,
    settings: Settings | None,
    environ: Mapping[str, str],
    argv: Sequence[str] = (),
) -> None:
    """Say why the start stops: a line of text on stderr, or, where the settings ask for JSON,
    one JSON line of the log, as every other line; either way with no secret of the settings
    in it (a file's line quoted in the reason may hold a key). Settings that could not be read
    (None) are read for their log format alone, from `argv` and `environ`."""
    if settings is None:
        settings = Settings(log_format=log_format_asked(argv, environ))
        if settings.log_format == "json":  # text is written as it is (uvicorn's needs a stdout)
            configure_logging(settings)
    if settings.log_format == "json":
        logger.error("%s", reason)  # Redact, the handler's filter, takes the secrets out
        wait_for_outlets()
    else:
        reason = redact(reason, settings.secrets)
        # One write, the line and its end together: print() writes them apart, and other
        # workers of `uvicorn app:app`, refusing at the same moment on the same stderr, came
        # in between. Where stderr is closed, stdout (as print() did).
        stream = sys.stderr or sys.stdout
        if stream is not None:
            stream.write(f"petstore: {reason}\n")
            stream.flush()


def write_stdout(text: str) -> None:
    """The service's own lines on stdout (a generated key, the ready line), in one write:
    print() writes a line and its end apart, which PYTHONUNBUFFERED (the image sets it) makes
    two system calls, and a line of another writer could come in between. Raises what the
    write raised (the reader is gone, the device full), once stdout is pointed at /dev/null:
    the text Python still holds would otherwise fail again at exit, with a traceback."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):  # ValueError: sys.stdout is closed
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        raise


def access_log_stream(settings: Settings) -> TextIO | None:
    """Where the access log goes: stdout at level info and below, else nowhere."""
    if settings.log_level not in ("info", "debug", "trace"):
        return None
    # A buffer of its own on stdout: PYTHONUNBUFFERED (set in many images) would otherwise
    # turn every line into a write(2). The Outlet's thread writes and flushes each drain's
    # lines (every 50 ms: accesslog.LOG_EVERY) as the reader takes them.
    stdout = open(  # noqa: SIM115 - the Outlet's, for the life of the process
        sys.stdout.fileno(),
        "w",
        buffering=1 << 16,
        encoding="utf-8",
        errors="backslashreplace",
        closefd=False,
    )
    outlet = Outlet(stdout, "the access log (stdout)", raise_errors=True)
    return outlet  # type: ignore[return-value] # it writes and flushes as a TextIO does
