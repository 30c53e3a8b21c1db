"""Logs (text or JSON lines, secrets redacted, written off the event loop), Prometheus metrics."""

from __future__ import annotations

import atexit
import bisect
import hashlib
import itertools
import json
import logging
import logging.config
import logging.handlers
import operator
import queue
import re
import secrets
import sys
import threading
from collections.abc import Iterator, Sequence, Sized
from typing import Any, Final

import uvicorn.config
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from schemas import rfc3339
from settings import Settings
from store import PetStore

REDACTED: Final = "[redacted]"
TENANT_KEY_PREFIX: Final = "pt_"  # a tenant's key: this, then TENANT_KEY_TOKEN characters
TENANT_KEY_TOKEN: Final = 43  # of secrets.token_urlsafe(32)
_TENANT_KEY: Final = re.compile(f"{TENANT_KEY_PREFIX}[\\w-]{{{TENANT_KEY_TOKEN}}}")
_METHODS: Final = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"))
_BUCKETS: Final = Histogram.DEFAULT_BUCKETS[:-1]  # and +Inf
_BUCKET_NAMES: Final = [*map(str, _BUCKETS), "+Inf"]
_LABELS: Final = ["method", "route"]


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every secret in it replaced, and whatever has a tenant key's form; `secrets`
    longest first."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return _TENANT_KEY.sub(REDACTED, text) if TENANT_KEY_PREFIX in text else text


def key_digest(key: bytes) -> bytes:
    """What a key is known by: a lookup by digest tells nothing of the key's characters.
    CPython's BLAKE2s, not OpenSSL's SHA-256: no lookup of the algorithm at every request."""
    return hashlib.blake2s(key).digest()


def tenant_key() -> str:
    """A new tenant's key: random, and of a form redact() finds without a list of the keys."""
    return TENANT_KEY_PREFIX + secrets.token_urlsafe(32)


class Redact(logging.Filter):
    """Takes every configured secret out of every record a handler writes: a client can put a
    key in a path, and an error names its request's path."""

    def __init__(self, secrets: Sequence[str]) -> None:
        super().__init__()
        self.secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):  # kept a tuple: uvicorn's access formatter unpacks it
            record.args = tuple(
                redact(arg, self.secrets) if isinstance(arg, str) else arg for arg in record.args
            )
        message = record.getMessage()
        if (redacted := redact(message, self.secrets)) != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(
                logging.Formatter().formatException(record.exc_info), self.secrets
            )
        return True


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: time (RFC 3339, UTC), level, logger, message, exc_info."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": rfc3339(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exc_info"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


class LineWriter(logging.handlers.QueueHandler):
    """The access log's handler: the event loop only queues each record, and a thread of its own
    lets lines gather for a moment, then writes them in one go."""

    def __init__(self, stream: Any) -> None:
        self.lines = queue.SimpleQueue[logging.LogRecord | None]()
        super().__init__(self.lines)
        # A buffer of its own on the stream's file: PYTHONUNBUFFERED makes each line a write.
        self.stream = open(stream.fileno(), "w", buffering=1 << 16, closefd=False)  # noqa: SIM115
        self.thread = threading.Thread(target=self.write, daemon=True)
        self.thread.start()
        WRITERS.append(self)
        atexit.register(self.stop)

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record  # its message is whole lines already: no copy, no formatting on the loop

    def write(self) -> None:
        while (record := self.lines.get()) is not None:
            self.stream.write(f"{record.msg}\n")
            if self.lines.empty():  # the middleware hands lines over in batches already
                self.stream.flush()
        self.stream.flush()

    def stop(self, seconds: float = 2.0) -> None:
        """Write what is queued and end the thread, waiting `seconds` at most for a reader."""
        self.lines.put(None)
        self.thread.join(seconds)


WRITERS: list[LineWriter] = []


def flush_logs() -> None:
    """Write out the access log's last lines at shutdown, before uvicorn ends the process."""
    for writer in WRITERS:
        writer.stop()


def logging_config(settings: Settings) -> dict[str, Any]:
    """The dictConfig of the service's and uvicorn's loggers: stderr, access logs on stdout."""
    json_lines = settings.log_format == "json"
    formatters = {
        **uvicorn.config.LOGGING_CONFIG["formatters"],
        "petstore": {"format": "%(levelname)-9s %(name)s: %(message)s"},
    }
    if json_lines:
        formatters = {name: {"()": JsonFormatter} for name in formatters}
    handlers: dict[str, Any] = {  # on stderr, a StreamHandler's default
        name: {"class": "logging.StreamHandler", "formatter": name, "filters": ["redact"]}
        for name in formatters
    }
    if not json_lines:
        handlers["access"]["stream"] = "ext://sys.stdout"
    # Its lines are redacted when the middleware makes them.
    handlers["petstore.access"] = {"()": LineWriter, "stream": "ext://sys.stdout"}
    level = uvicorn.config.LOG_LEVELS[settings.log_level]
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": formatters,
        "filters": {"redact": {"()": Redact, "secrets": settings.secrets}},
        "handlers": handlers,
        "loggers": {
            "petstore": {"handlers": ["petstore"], "level": level, "propagate": False},
            "petstore.access": {
                "handlers": ["petstore.access"],
                "level": max(level, logging.INFO),  # --log-level warning and up: no access log
                "propagate": False,
            },
            # uvicorn's are listed without a level: they keep those uvicorn gives them (its
            # --log-level under `uvicorn app:app`), where dictConfig would reset one not listed.
            "uvicorn": {"handlers": ["default"], "propagate": False},
            "uvicorn.error": {},
            "uvicorn.asgi": {},
            "uvicorn.access": {"handlers": ["access"], "propagate": False},
        },
        "root": {"handlers": ["petstore"], "level": "WARNING"},
    }


def configure_logging(settings: Settings) -> None:
    """Apply logging_config(settings), and send Python's warnings to the log."""
    logging.config.dictConfig(logging_config(settings))
    logging.captureWarnings(True)


def refuse_start(reason: str, json_lines: bool, secrets: Sequence[str] = ()) -> None:
    """Say why the start stops, in one line on stderr (JSON under --log-format json), no secret
    in it: the reason may quote a file."""
    line = f"petstore: {redact(reason, secrets)}"
    if json_lines:
        fields = {"name": "petstore", "levelname": "ERROR", "msg": redact(reason, secrets)}
        line = JsonFormatter().format(logging.makeLogRecord(fields))
    sys.stderr.write(f"{line}\n")  # one write: workers refusing at once keep their lines whole


class Metrics:
    """The service's Prometheus metrics, in a registry of its own (one per app). Requests are
    counted in dicts, made metric families at a scrape: cheaper than a Counter and a Histogram."""

    def __init__(self, store: PetStore, tenants: Sized, *, datafile: bool) -> None:
        registry = self.registry = CollectorRegistry()
        # By method, route and status: the count in each duration bucket, then the durations summed.
        self.requests: dict[tuple[str, str, int | None], list[float]] = {}
        registry.register(self)
        pets = Gauge("petstore_pets", "Pets stored", registry=registry)
        pets.set_function(lambda: store.count)
        writable = Gauge("petstore_store_writable", "1 when creates can succeed", registry=registry)
        writable.set_function(lambda: store.unwritable is None)
        count = Gauge("petstore_tenants", "Tenants the plane made", registry=registry)
        count.set_function(lambda: len(tenants))
        file_registry = registry if datafile else None  # only with a data file
        self.sync_duration = Histogram(
            "petstore_datafile_sync_duration_seconds",
            "Time of each fsync of the data file",
            registry=file_registry,
        )
        self.write_errors = Counter(
            "petstore_datafile_write_errors",
            "Failed writes to the data file",
            registry=file_registry,
        )

    def observe(self, method: str, route: str, status: int | None, seconds: float) -> None:
        """Count one answered request."""
        key = (method if method in _METHODS else "other", route, status)  # no label grows
        if (counts := self.requests.get(key)) is None:
            counts = self.requests[key] = [0] * len(_BUCKET_NAMES) + [0.0]
        counts[bisect.bisect_left(_BUCKETS, seconds)] += 1
        counts[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        """The request metrics, made at a scrape."""
        text = "HTTP requests answered, by method, route template and status"
        requests = CounterMetricFamily("petstore_http_requests", text, labels=[*_LABELS, "status"])
        durations: dict[tuple[str, str], list[float]] = {}  # the statuses' counts added up
        for (method, route, status), counts in self.requests.items():
            shown = "dropped" if status is None else str(status)
            requests.add_metric([method, route, shown], sum(counts[:-1]))
            total = durations.get((method, route), [0.0] * len(counts))
            durations[method, route] = [*map(operator.add, total, counts)]
        text = "Time from a request's arrival to its answer"
        name = "petstore_http_request_duration_seconds"
        duration = HistogramMetricFamily(name, text, labels=_LABELS)
        for labels, counts in durations.items():
            buckets = zip(_BUCKET_NAMES, itertools.accumulate(counts[:-1]), strict=True)
            duration.add_metric(list(labels), list(buckets), counts[-1])
        yield from (requests, duration)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
