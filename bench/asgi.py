"""What the two baselines (bench/ceiling.py, bench/bare.py) share: ASGI types, fixed headers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from schemas import DEPRECATION, PETS_PATH, SUNSET

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

JSON: Final = (b"content-type", b"application/json")
# getPet's headers on every answer, as the service sends them.
DEPRECATED: Final = (
    (b"deprecation", DEPRECATION.encode()),
    (b"sunset", SUNSET.encode()),
    (b"link", f'<{PETS_PATH}>; rel="successor-version"'.encode()),
)
