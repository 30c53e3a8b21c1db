"""The logs: one logging configuration for the service and uvicorn (text or JSON lines), the
filter that keeps every secret out of them, and the access log's stream."""

from __future__ import annotations

import copy
import logging
import logging.config
import sys
from collections.abc import Sequence
from typing import Any, Final, TextIO

import msgspec
import uvicorn.config
from uvicorn.config import LOG_LEVELS

from journal import redact, rfc3339
from settings import Settings


class Redact(logging.Filter):
    """Every secret of the configuration (API and admin keys, the database's password) out of
    every log record, whoever writes it, as `[redacted]`: a client can put a key in a path or a
    query, and lines of ours (an error names its request's path) and uvicorn's (at trace, each
    request's scope; under `uvicorn app:app`, its access log) would carry it. On the handlers,
    so that it sees the records of every logger; the access log's own lines are redacted where
    they are made (accesslog.py)."""

    def __init__(self, secrets: Sequence[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secret for secret in secrets if secret)

    def redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        if isinstance(record.args, tuple):  # kept a tuple: uvicorn's access formatter reads it
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in record.args)
        message = record.getMessage()
        if any(secret in message for secret in self.secrets):  # in a dict, bytes, ...
            record.msg, record.args = self.redact(message), None
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
        return _log_line_encoder.encode(line).decode()


_log_line_encoder: Final = msgspec.json.Encoder()


def logging_config(settings: Settings) -> dict[str, Any]:
    """The one logging configuration (logging.config.dictConfig's) of the service's logger and
    uvicorn's, all on stderr. text: uvicorn's own set-up, and ours beside it, as they always
    were. json: one handler, JsonFormatter, for both (uvicorn's access log too, which
    `python app.py` turns off: ours is cheaper)."""
    ours = {"level": LOG_LEVELS[settings.log_level], "propagate": False}
    redact = {"()": Redact, "secrets": settings.secrets}
    if settings.log_format == "text":
        config: dict[str, Any] = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
        config["formatters"]["petstore"] = {"format": "%(levelname)-9s %(name)s: %(message)s"}
        config["handlers"]["petstore"] = {
            "class": "logging.StreamHandler",
            "formatter": "petstore",
            "stream": "ext://sys.stderr",
        }
        config["filters"] = {"redact": redact}
        for handler in config["handlers"].values():
            handler["filters"] = ["redact"]
        config["loggers"]["petstore"] = {"handlers": ["petstore"], **ours}
        return config
    uvicorn_loggers = {"handlers": ["json"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "filters": {"redact": redact},
        "handlers": {
            "json": {
                "class": "logging.StreamHandler",
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
    }


def configure_logging(settings: Settings, *, uvicorn_too: bool = True) -> None:
    """Apply logging_config(settings). Without `uvicorn_too` only the service's logger is set
    up: under `uvicorn app:app` in text, uvicorn's loggers keep what uvicorn gave them."""
    config = logging_config(settings)
    if not uvicorn_too:
        config["loggers"] = {"petstore": config["loggers"]["petstore"]}
    logging.config.dictConfig(config)
    if not uvicorn_too:  # uvicorn's handlers as uvicorn made them, our filter added
        redact = Redact(settings.secrets)
        for name in ("uvicorn", "uvicorn.access"):
            for handler in logging.getLogger(name).handlers:
                handler.addFilter(redact)


def access_log_stream(settings: Settings) -> TextIO | None:
    """Where the access log goes: stdout at level info and below, else nowhere."""
    if settings.log_level not in ("info", "debug", "trace"):
        return None
    # A buffer of its own on stdout: PYTHONUNBUFFERED (set in many images) would otherwise
    # turn every line into a write(2). The app's lifespan flushes it every 50 ms (app.LOG_EVERY).
    return open(
        sys.stdout.fileno(),
        "w",
        buffering=1 << 16,
        encoding="utf-8",
        errors="backslashreplace",
        closefd=False,
    )
