"""Settings: flags, then PETSTORE_* variables, then defaults, read once into one frozen object."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import secrets
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

LOG_LEVELS: Final = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


class SettingsError(Exception):
    """A setting that stops the start; its text is the one line the user sees."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything configurable; secrets are kept out of its repr."""

    host: str = "127.0.0.1"
    port: int = 8000
    data: str | None = None
    seed: str | None = None
    api_keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    max_body: int = 1024 * 1024
    root_path: str = ""
    log_level: str = "info"
    log_format: str = "text"
    client_timeout: float = 10.0
    cors_origins: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    journal_size: int = 1000
    max_tenants: int = 100
    tenant_idle_seconds: float = 3600.0
    metrics: bool = True
    database: str | None = dataclasses.field(default=None, repr=False)
    database_password: str | None = dataclasses.field(default=None, repr=False)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What no log line or journal entry may show, longest first."""
        found = {*self.api_keys, *self.admin_keys}
        if self.database_password:
            found |= {self.database_password, urllib.parse.quote(self.database_password, safe="")}
        return tuple(sorted(found, key=len, reverse=True))


def _number(kind: type[int] | type[float], low: float, high: float) -> Callable[[str], Any]:
    what = "an integer" if kind is int else "seconds"

    def parse(text: str) -> int | float:
        with contextlib.suppress(ValueError):  # not a number, or too long for int()
            if low <= (value := kind(text)) <= high:
                return value
        raise ValueError(f"expected {what} from {low} to {high}, got {text!r}")

    return parse


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text.lower()

    return parse


def _given(text: str) -> str:
    if not text:
        raise ValueError("is empty: give a value, or leave it out for the default")
    return text


def _host(text: str) -> str:
    return _given(text[1:-1] if text.startswith("[") and text.endswith("]") else text)


def _root_path(text: str) -> str:
    if text and not re.fullmatch(r"(/[A-Za-z0-9\-._~%!$&'()*+,;=:@]+)+", text):
        raise ValueError(f"expected a path like /api (no trailing /), got {text!r}")
    return text


def _database(text: str) -> str:
    """A libpq URL: several hosts, or none (a socket, `?host=`), may be given."""
    scheme, _, rest = _given(text).partition("://")
    if scheme not in ("postgresql", "postgres") or not rest:
        raise ValueError("expected postgresql://USER:PASSWORD@HOST:PORT/DB")
    authority = re.split("[/?#]", rest, maxsplit=1)[0]
    user, _, hosts = authority.rpartition("@")
    if "@" in user or "#" in rest or "@" in rest[len(authority) :]:
        # The driver and urllib would read the user's part two ways.
        raise ValueError("write an @, #, / or ? in the password as %40, %23, %2F or %3F")
    try:  # each host as urllib reads one: brackets that close, an IPv6 address, a port
        for host in [user + "@", *hosts.split(",")]:
            urllib.parse.urlsplit("//" + host).port  # noqa: B018 - raises for a bad one
    except ValueError:
        raise ValueError("a host or port that is not one (an IPv6 address goes in [])") from None
    return text


def _origin(text: str) -> str:
    if not re.fullmatch(r"\*|https?://([A-Za-z0-9.\-]+|\[[0-9a-fA-F:.]+\])(:[0-9]{1,5})?", text):
        raise ValueError(f"expected * or an origin like https://app.example:8080, got {text!r}")
    return text.lower()


def _key(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9\-._~+/]+=*", text):  # RFC 6750 b64token; never shown
        raise ValueError("a key is empty or holds characters a bearer token can't carry")
    return text


def _key_file(path: str) -> tuple[str, ...]:
    try:
        with open(_given(path), encoding="utf-8") as file:
            keys = tuple(_key(line.strip()) for line in file if line.strip())
    except OSError as error:  # one not UTF-8 is a ValueError too
        raise ValueError(f"cannot read {path!r}: {error.strerror}") from None
    if not keys:
        raise ValueError(f"{path!r} holds no key")
    return keys


# Field, parser, and whether the flag repeats (its variable then a comma-separated list). The flag
# is --field-name (singular if it repeats), the variable PETSTORE_FIELD_NAME unless named below.
_SETTINGS: Final[tuple[tuple[str, Callable[[str], Any], bool], ...]] = (
    ("host", _host, False),
    ("port", _number(int, 0, 65535), False),
    ("data", _given, False),
    ("seed", _given, False),
    ("api_keys", _key, True),
    ("api_key_file", _key_file, False),
    ("max_body", _number(int, 1, 2**40), False),
    ("root_path", _root_path, False),
    ("log_level", _choice(*LOG_LEVELS), False),
    ("log_format", _choice("text", "json"), False),
    ("client_timeout", _number(float, 0.01, 3600), False),
    ("cors_origins", _origin, True),
    ("admin_keys", _key, True),
    ("journal_size", _number(int, 0, 1_000_000), False),
    ("max_tenants", _number(int, 1, 100_000), False),
    ("tenant_idle_seconds", _number(float, 0.1, 10**7), False),
    ("metrics", _choice("on", "off"), False),
    ("database", _database, False),
)
_VARIABLES: Final = {"api_key_file": "API_KEYS_FILE", "database": "DATABASE_URL"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        # What argparse quotes or lists may be a key given by mistake: never shown.
        message = re.sub(r"'[^']*'|(?<=^unrecognized arguments): .*", "", message)
        raise SettingsError(message + " (--help lists the flags)")


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> Settings:
    """Settings from command-line flags, then PETSTORE_* variables, then defaults."""
    parser = _Parser(prog="app.py", description="Serve the petstore.", allow_abbrev=False)
    sources: dict[str, str] = {}  # the flag a refusal names, or the variable if used
    for name, _, repeats in _SETTINGS:
        sources[name] = "--" + (name.removesuffix("s") if repeats else name).replace("_", "-")
        parser.add_argument(sources[name], dest=name, action="append" if repeats else "store")
    flags = vars(parser.parse_args(argv))
    values: dict[str, Any] = {}
    for name, parse, repeats in _SETTINGS:
        given, source = flags[name], sources[name]
        variable = "PETSTORE_" + _VARIABLES.get(name, name.upper())
        if given is None and variable in environ:
            given, source = environ[variable], variable
            given = [item.strip() for item in given.split(",")] if repeats else given
        if given is not None:
            try:
                values[name] = tuple(parse(item) for item in given) if repeats else parse(given)
            except ValueError as error:
                raise SettingsError(f"{source}: {error}") from None
    values["api_keys"] = values.get("api_keys", ()) + values.pop("api_key_file", ())
    values["metrics"] = values.get("metrics", "on") == "on"
    if "database" in values:
        values["database_password"] = _password(values["database"], environ)
    settings = Settings(**values)
    if set(settings.api_keys) & set(settings.admin_keys):
        raise SettingsError("a key is configured both as an API key and as an admin key")
    if settings.data and settings.database:
        raise SettingsError("--data and --database: pets live in a file or a database, not both")
    return settings


def _password(url: str, environ: Mapping[str, str]) -> str | None:
    """The database's password: the URL's (its user part, else its query), else PGPASSWORD's."""
    split = urllib.parse.urlsplit(url)
    if split.password:
        return urllib.parse.unquote(split.password)
    query = urllib.parse.parse_qs(split.query).get("password")  # libpq and asyncpg take it too
    return query[-1] if query else environ.get("PGPASSWORD") or None


def asks_json(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether JSON logs are asked for, read alone: a refusal of another setting uses the format."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--log-format", default=environ.get("PETSTORE_LOG_FORMAT", ""))
    with contextlib.suppress(argparse.ArgumentError):
        return str(parser.parse_known_args(argv)[0].log_format).lower() == "json"
    return False


def with_key(settings: Settings) -> tuple[Settings, str]:
    """Settings with an API key (generated if none is configured), and the line that shows it."""
    if settings.api_keys:
        return settings, ""
    key = secrets.token_urlsafe(32)
    line = f"petstore: no API key configured; this run accepts: Bearer {key}\n"
    return dataclasses.replace(settings, api_keys=(key,)), line
