"""A libpq URL: its checks, its password, and the name logs give the database."""

from __future__ import annotations

import re
import urllib.parse

_EXPECTED = (
    "expected a URL like postgresql://USER:PASSWORD@HOST:PORT/DATABASE (an @, #, / or ? in the"
    " password written %40, %23, %2F or %3F)"
)


def problem(url: str) -> str | None:
    """What is wrong with a libpq URL, one host or several (`HOST:PORT,HOST:PORT`); None if
    nothing is. The text is never in it: it may hold a password."""
    scheme, _, rest = url.partition("://")
    authority = re.split("[/?#]", rest, maxsplit=1)[0]
    userinfo, _, hosts = authority.rpartition("@")
    # The driver reads the user's part up to the first @, urllib up to the last, and a #, / or
    # ? ends it for both: what a password holds past such a character would be logged as a
    # host, and an @ left after it (in the database's name, or the query) tells of one.
    if "@" in userinfo or "#" in rest or "@" in rest[len(authority) :]:
        return "write an @, #, / or ? in the password as %40, %23, %2F or %3F"
    # What follows each host's last colon, past an IPv6 address's brackets: its port.
    ports = [host.rpartition(":")[2] for host in hosts.split(",") if ":" in host.split("]")[-1]]
    if scheme not in ("postgresql", "postgres") or not rest or not all(map(is_port, ports)):
        return _EXPECTED
    if "[" in userinfo or "]" in userinfo:  # urllib takes them for a host's brackets
        return "write a [ or ] in the password as %5B or %5D"
    try:  # as password() and describe() will read it: brackets that hold no IPv6 address
        urllib.parse.urlsplit(url)
    except ValueError:
        return (
            "its host can't be read: a host in brackets must be an IPv6 address ([::1]:5432),"
            " and a character past ASCII in the password is best percent-encoded"
        )
    return None


def password(url: str) -> str | None:
    """The password a libpq URL holds, decoded, as the driver reads it: the user's part's,
    else the query's `password` (the last one); None if it holds none."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        return urllib.parse.unquote(parts.password)
    given = urllib.parse.parse_qs(parts.query).get("password")
    return given[-1] if given else None


def written_password(url: str) -> str | None:
    """The password a libpq URL holds, as the URL writes it (percent-encoded)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        return parts.password
    pairs = (pair.partition("=") for pair in parts.query.split("&"))
    written = [value for name, _, value in pairs if name == "password"]
    return written[-1] if written else None


def describe(url: str) -> str:
    """The URL as logs may show it: host, port and database, never the user's password."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qs(parts.query)
    hosts = parts.netloc.rpartition("@")[2]  # one HOST:PORT, or several joined by commas
    return f"{hosts or ''.join(query.get('host', [])) or 'localhost'}{parts.path or '/'}"


def is_port(text: str) -> bool:
    """Whether this is what follows a host's last colon in a URL: a port (ASCII digits, at
    most 65535)."""
    digits = text.lstrip("0")  # int() refuses 4,301 digits, a traceback
    return text.isascii() and text.isdigit() and len(digits) <= 5 and int(text) <= 65535
