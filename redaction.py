"""Keeping secrets out of text: each one found written as REDACTED."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

REDACTED: Final = "[redacted]"


def longest_first(secrets: Iterable[str | None]) -> tuple[str, ...]:
    """The secrets as `redact` takes them: each once, none empty, longest first (a key inside
    another, an API key within an admin key, would leave the rest of the longer one around
    its REDACTED), then in order (the same every time)."""
    return tuple(sorted({secret for secret in secrets if secret}, key=lambda s: (-len(s), s)))


def redact_encoded(text: str, secrets: Iterable[str], decode: Callable[[str], str]) -> str:
    """The text as sent, or decoded when a key hides in its encoding (a query's or a header's
    percent-encoding, a body's JSON escapes): redacted either way."""
    text = redact(text, secrets)
    decoded = decode(text)
    redacted = redact(decoded, secrets)
    return redacted if redacted != decoded else text


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` (longest_first) in it written as REDACTED (the journal,
    the access log's lines and every other log line keep keys out this way)."""
    for secret in secrets:
        if secret in text:  # one scan a secret; a copy only when it is there
            if secret in REDACTED:  # a piece of the mark ("e"): the marks already made stay
                pieces = text.split(REDACTED)
                text = REDACTED.join(piece.replace(secret, REDACTED) for piece in pieces)
            else:
                text = text.replace(secret, REDACTED)
    return text
