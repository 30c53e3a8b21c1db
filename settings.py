"""Settings: flags, PETSTORE_* variables and key files, read once into one frozen object."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import ipaddress
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import database_url
from flags import LOG_LEVELS, FlagError, parser
from redaction import longest_first

# RFC 6750 b64token: what a bearer credential can carry.
_BEARER_TOKEN: Final = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


class SettingsError(Exception):
    """A setting that stops the start; its text is the one line the user sees."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable, read once from flags and the environment (flags win)."""

    host: str = "127.0.0.1"
    port: int = 8000
    data: str | None = None
    seed: str | None = None
    api_keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)  # secrets, as below
    max_body: int = 1024 * 1024
    root_path: str = ""
    log_level: str = "info"
    client_timeout: float = 10.0
    cors_origins: tuple[str, ...] = ()
    admin_keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)  # none: no plane
    journal_size: int = 1000
    log_format: str = "text"  # or "json": one JSON object a line
    metrics: bool = True  # GET /metrics, and the counting behind it
    database: str | None = dataclasses.field(
        default=None, repr=False
    )  # a libpq URL: it may hold a password
    # The environment's PGPASSWORD, which the driver reads when the URL has no password.
    pgpassword: str | None = dataclasses.field(default=None, repr=False)
    # A client's address (and scheme) taken from X-Forwarded-For (-Proto), sent by the proxies
    # FORWARDED_ALLOW_IPS names: uvicorn's variable, which it reads itself; set, not PETSTORE_'s.
    forwarded: bool = False

    @property
    def database_password(self) -> str | None:
        """The password the driver is given: the URL's (decoded), else PGPASSWORD's."""
        return (database_url.password(self.database) if self.database else None) or self.pgpassword

    @property
    def secrets(self) -> tuple[str, ...]:
        """What no log line and no journal entry may show: the keys of both kinds and the
        database's password (as the URL writes it and as it is), longest first."""
        encoded = database_url.written_password(self.database) if self.database else None
        return longest_first((*self.api_keys, *self.admin_keys, encoded, self.database_password))


def _integer(low: int, high: int) -> Callable[[str, str], int]:
    def parse(text: str, name: str) -> int:
        # Past 30 digits it is out of range whatever it says (and int() refuses 4,301).
        if not re.fullmatch(r"[0-9]{1,30}", text) or not low <= int(text) <= high:
            shown = text if len(text) <= 40 else f"{text[:37]}..."
            raise SettingsError(f"{name}: expected an integer from {low} to {high}, got {shown!r}")
        return int(text)

    return parse


def _given(text: str, name: str) -> str:
    """A value that must say something: an empty one (`PETSTORE_DATA=` in a compose file whose
    variable was not set) is refused rather than taken as no setting (pets in memory,
    unnoticed) or, for the host, as every address."""
    if not text:
        raise SettingsError(f"{name} is empty: give a value, or leave it out for the default")
    return text


def _host(text: str, name: str) -> str:
    """A host name or address; `[::1]` is ::1, as the ready line writes it."""
    host = _given(text, name)
    if host.startswith("[") and host.endswith("]"):
        host = _given(host[1:-1], name)  # `[]` is empty too
    return host


def _root_path(text: str, name: str) -> str:
    if text and not re.fullmatch(r"(/[A-Za-z0-9\-._~%!$&'()*+,;=:@]+)+", text):
        raise SettingsError(f"{name}: expected a path like /api (no trailing /), got {text!r}")
    return text


def _log_level(text: str, name: str) -> str:
    if text.lower() not in LOG_LEVELS:
        raise SettingsError(f"{name}: expected one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return text.lower()


def _log_format(text: str, name: str) -> str:
    if text.lower() not in ("text", "json"):
        raise SettingsError(f"{name}: expected text or json, got {text!r}")
    return text.lower()


def _switch(text: str, name: str) -> bool:
    if text.lower() not in ("on", "off"):
        raise SettingsError(f"{name}: expected on or off, got {text!r}")
    return text.lower() == "on"


def _database_url(text: str, name: str) -> str:
    if (wrong := database_url.problem(_given(text, name))) is not None:
        raise SettingsError(f"{name}: {wrong}")
    return text


def bracketed(host: str) -> str:
    """A host as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def _seconds(text: str, name: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    # Under 10 ms every client would be cut off before its request could arrive.
    if not 0.01 <= seconds <= 3600:
        raise SettingsError(f"{name}: expected seconds from 0.01 to 3600, got {text!r}")
    return seconds


# Settings field, environment variable, parser. The flag is the field's name in kebab case.
_SOURCES: Final = (
    ("host", "PETSTORE_HOST", _host),
    ("port", "PETSTORE_PORT", _integer(0, 65535)),
    ("data", "PETSTORE_DATA", _given),
    ("seed", "PETSTORE_SEED", _given),
    ("max_body", "PETSTORE_MAX_BODY", _integer(1, 2**40)),
    ("root_path", "PETSTORE_ROOT_PATH", _root_path),
    ("log_level", "PETSTORE_LOG_LEVEL", _log_level),
    ("client_timeout", "PETSTORE_CLIENT_TIMEOUT", _seconds),
    ("journal_size", "PETSTORE_JOURNAL_SIZE", _integer(0, 1_000_000)),
    ("log_format", "PETSTORE_LOG_FORMAT", _log_format),
    ("metrics", "PETSTORE_METRICS", _switch),
    ("database", "PETSTORE_DATABASE_URL", _database_url),
)
# The variables read apart from _SOURCES: lists (comma-separated) and the key file.
_API_KEYS: Final = "PETSTORE_API_KEYS"
_API_KEYS_FILE: Final = "PETSTORE_API_KEYS_FILE"
_ADMIN_KEYS: Final = "PETSTORE_ADMIN_KEYS"
_CORS_ORIGINS: Final = "PETSTORE_CORS_ORIGINS"
# Every variable that is a setting: `cautions` warns of any other PETSTORE_* one.
_VARIABLES: Final = frozenset(
    {variable for _, variable, _ in _SOURCES}
    | {_API_KEYS, _API_KEYS_FILE, _ADMIN_KEYS, _CORS_ORIGINS}
)


def _read_key_file(path: str, name: str) -> list[tuple[str, str]]:
    """The file's keys, one a line (blank lines skipped), each with where it is: its line."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = [(f"line {n}", line.strip()) for n, line in enumerate(file, 1)]
    except OSError as error:
        raise SettingsError(f"{name}: cannot read {path!r}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise SettingsError(f"{name}: cannot read {path!r}: {error}") from None
    keys = [(key, f"{name}: {where}") for where, key in lines if key]
    if not keys:
        raise SettingsError(f"{name}: {path!r} holds no key")
    return keys


def _listed(
    values: list[str] | None, flag: str, environ: Mapping[str, str], variable: str
) -> list[tuple[str, str]]:
    """A repeatable flag's values, else a comma-separated variable's, each with its source."""
    if values is not None:
        return [(value, flag) for value in values]
    if variable in environ:
        return [(value.strip(), variable) for value in environ[variable].split(",")]
    return []


def _api_keys(flags: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Keys from --api-key (else PETSTORE_API_KEYS) plus the key file's; checked, never shown."""
    keys = _numbered(_listed(flags.api_key, "--api-key", environ, _API_KEYS))
    file_source = "--api-key-file" if flags.api_key_file is not None else _API_KEYS_FILE
    path = flags.api_key_file
    if path is None:
        path = environ.get(_API_KEYS_FILE)
    if path is not None:  # an empty one too: it names no file (a refusal, not no setting)
        keys += _read_key_file(path, file_source)
    return _tokens(keys)


def _admin_keys(flags: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, ...]:
    return _tokens(_numbered(_listed(flags.admin_key, "--admin-key", environ, _ADMIN_KEYS)))


def _numbered(keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Keys with where each is: its source and its number there (all come from one source)."""
    return [(key, f"{source}: key #{n}") for n, (key, source) in enumerate(keys, 1)]


def _tokens(keys: list[tuple[str, str]]) -> tuple[str, ...]:
    """The keys, each checked to be a bearer token (the message says where it is, never what
    it is), once each."""
    for key, where in keys:
        if not _BEARER_TOKEN.fullmatch(key):
            raise SettingsError(f"{where} is empty or holds characters a bearer token can't carry")
    return tuple(dict.fromkeys(key for key, _ in keys))


# An origin as browsers send it: scheme, host and maybe a port; no path, not even a final /.
_ORIGIN: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s,@]+")  # no user's part
_HOST_PORT: Final = re.compile(r"(\[[^\]]*\]|[^:]*)(?::([0-9]+))?")
_HOST_NAME: Final = re.compile(r"[a-z0-9_.\-]+")  # lower case: the origin was


def _cors_origins(flags: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, ...]:
    """Origins as browsers send them: scheme and host in lower case, no default port (one
    written `HTTP://App.Example:80` matched no browser's). No wildcard within one."""
    origins = _listed(flags.cors_origin, "--cors-origin", environ, _CORS_ORIGINS)
    taken = []
    for origin, source in origins:
        scheme, _, authority = origin.lower().partition("://")
        parts = _HOST_PORT.fullmatch(authority) if _ORIGIN.fullmatch(origin) else None
        if parts is not None and parts[2] is not None and not database_url.is_port(parts[2]):
            parts = None  # a port past 65535, which no browser sends (the database's rule)
        if origin == "*":
            taken.append(origin)
        elif parts is None or "*" in origin:
            wildcard = " (no wildcard within an origin: name each one)" * ("*" in origin)
            raise SettingsError(
                f"{source}: expected * or an origin like https://app.example:8080, got"
                f" {origin!r}{wildcard}"
            )
        elif (host := _browser_host(parts[1])) is None:
            raise SettingsError(
                f"{source}: {origin!r} has a host no browser sends: write it as the browser's"
                " Origin header does (a name, punycode past ASCII, or an IP address like"
                " 127.0.0.1 or [::1])"
            )
        else:
            port = parts[2]
            default = {"http": 80, "https": 443}.get(scheme)
            port = "" if port is None or int(port) == default else f":{int(port)}"  # :080 is 80
            taken.append(f"{scheme}://{host}{port}")
    return tuple(dict.fromkeys(taken))


def _browser_host(host: str) -> str | None:
    """A host as a browser's Origin writes it (`bücher.example` as `xn--bcher-kva.example`, an
    IPv6 address compressed), None for one no browser sends (a `%`, a `#`, an IPv4 address
    with leading zeros): a preflight from it never matched."""
    if host.startswith("["):
        try:
            return f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            return None
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    numbers = host.split(".")
    if all(map(str.isdigit, numbers)) and any(len(n) > 1 and n[0] == "0" for n in numbers):
        return None
    return host if _HOST_NAME.fullmatch(host) else None


def load_settings(
    argv: Sequence[str], environ: Mapping[str, str], *, address_only: bool = False
) -> Settings:
    """Settings from command-line flags, then PETSTORE_* variables, then defaults. With
    `address_only` (`healthcheck`), every flag is taken but only the host and the port are
    read: a setting the check has no use for (a key file rotated away) can't fail it."""
    try:
        flags = parser().parse_flags(argv)
    except FlagError as error:
        raise SettingsError(str(error)) from None
    values: dict[str, Any] = {}
    if not address_only:
        values["api_keys"] = _api_keys(flags, environ)
        values["admin_keys"] = _admin_keys(flags, environ)
        values["cors_origins"] = _cors_origins(flags, environ)
        if set(values["api_keys"]) & set(values["admin_keys"]):
            raise SettingsError("a key is configured both as an API key and as an admin key")
    sources = {}
    for field, variable, parse in _SOURCES:
        if address_only and field not in ("host", "port"):
            continue
        if (flag := getattr(flags, field)) is not None:
            sources[field] = "--" + field.replace("_", "-")
            values[field] = parse(flag, sources[field])
        elif variable in environ and not is_service_link(variable, environ):
            sources[field] = variable
            values[field] = parse(environ[variable], variable)
    if "data" in values and "database" in values:
        raise SettingsError(
            f"{sources['data']} and {sources['database']}: pets live in a file or in a"
            " database, not both"
        )
    if "database" in values and environ.get("PGPASSWORD"):
        values["pgpassword"] = environ["PGPASSWORD"]
    values["forwarded"] = "FORWARDED_ALLOW_IPS" in environ
    return Settings(**values)


# Kubernetes gives each container variables for every Service of its namespace: one named
# `petstore` makes PETSTORE_PORT=tcp://10.0.0.7:8000, PETSTORE_SERVICE_HOST and the like.
_SERVICE_LINK: Final = re.compile(
    r"PETSTORE_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT_\d+_(TCP|UDP|SCTP)(_\w+)?)"
)
_SERVICE_LINK_PORT: Final = re.compile(r"(tcp|udp|sctp)://\S+:\d+")


def log_format_asked(argv: Sequence[str], environ: Mapping[str, str]) -> str:
    """The log format the flags (the last `--log-format`) or PETSTORE_LOG_FORMAT ask for, read
    alone, for a start refused for another setting (`--port abc`, an unknown flag); `text`
    when it is not one."""
    asked = environ.get("PETSTORE_LOG_FORMAT")
    for position, argument in enumerate(argv):
        if argument == "--log-format" and position + 1 < len(argv):
            asked = argv[position + 1]
        elif argument.startswith("--log-format="):
            asked = argument.partition("=")[2]
    return "json" if asked is not None and asked.lower() == "json" else "text"


def is_service_link(variable: str, environ: Mapping[str, str]) -> bool:
    """Whether the variable is Kubernetes' service link rather than a setting."""
    return variable == "PETSTORE_PORT" and bool(_SERVICE_LINK_PORT.fullmatch(environ[variable]))


# Shorter keys get a warning at start (`cautions`).
KEY_LENGTH_ADVISED: Final = 16


def cautions(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """What the start warns of without refusing: short keys and a short database password
    (easy to guess, and every log line writes `[redacted]` wherever their text appears: `admin`
    in each /_admin path, `pets` in each /v1/pets), PETSTORE_* variables that are no setting (a
    misspelt one is otherwise silently ignored), and Kubernetes' service links (ignored)."""
    passwords = [settings.database_password] if settings.database_password else []
    short_secrets = [
        *((f"API key #{n}", "key", key) for n, key in enumerate(settings.api_keys, 1)),
        *((f"admin key #{n}", "key", key) for n, key in enumerate(settings.admin_keys, 1)),
        *(("the database's password", "password", password) for password in passwords),
    ]
    found = [
        f"{name} is {len(secret)} characters long: a short {kind} is easy to guess, and the "
        f"logs write [redacted] wherever its text appears; use {KEY_LENGTH_ADVISED} or more"
        for name, kind, secret in short_secrets
        if len(secret) < KEY_LENGTH_ADVISED
    ]
    if "PETSTORE_PORT" in environ and is_service_link("PETSTORE_PORT", environ):
        found.append(
            "PETSTORE_PORT is Kubernetes' service link for a Service named petstore, not a port:"
            " it is ignored (the pod's enableServiceLinks: false leaves it out)"
        )
    for name in sorted(environ):
        if _SERVICE_LINK.fullmatch(name):
            continue
        if name.startswith("PETSTORE_") and name not in _VARIABLES:
            # Compared without the prefix they share, which would make them all alike.
            close = difflib.get_close_matches(
                name.removeprefix("PETSTORE_"),
                [variable.removeprefix("PETSTORE_") for variable in sorted(_VARIABLES)],
                n=1,
            )
            hint = f" (did you mean PETSTORE_{close[0]}?)" if close else ""
            found.append(f"{name} is no setting and is ignored{hint}")
    return found


def with_key(settings: Settings) -> tuple[Settings, str]:
    """Settings with at least one API key, and the line that shows a generated one (its only
    showing, on stdout: "" when keys were configured)."""
    if settings.api_keys:
        return settings, ""
    key = secrets.token_urlsafe(32)
    line = f"petstore: no API key configured; this run accepts: Bearer {key}\n"
    return replace(settings, api_keys=(key,)), line
