"""Idempotency keys: which keyed create made which pet, and how long that is remembered."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from typing import Final

from schemas import NewPet, Pet

# A key is forgotten only once it is older than this AND this many newer keyed creates came
# after it (CONTRACT.md, Idempotent creates): whichever of the two is reached last.
RETAIN_SECONDS: Final = 24 * 60 * 60
RETAIN_KEYS: Final = 100_000


class IdempotencyConflict(Exception):
    """The key's first create is still in flight (for example, waiting for its fsync)."""


class IdempotencyKeyReused(Exception):
    """The key was used for a different request."""


def same_request(new_pet: NewPet, pet: Pet) -> bool:
    """Whether `new_pet` asks for what `pet` was made from: the decoded request, so key order,
    spacing and `1.0` against `1` do not matter. A NewPet holds exactly the fields the Pet
    kept of it (the Pet adds only its id), so comparing with the Pet is comparing requests."""
    return (new_pet.name, int(new_pet.categoryId), new_pet.status) == (
        pet.name,
        pet.categoryId,
        pet.status,
    )


class IdempotencyKeys:
    """The remembered keys, oldest first, each with its pet and the time it was made, and the
    keys whose first create is in flight. Not thread-safe: the caller holds its store's lock."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._pets: collections.OrderedDict[str, tuple[Pet, int]] = collections.OrderedDict()
        self._in_flight: set[str] = set()

    def __len__(self) -> int:
        return len(self._pets)

    def __contains__(self, key: str) -> bool:
        return key in self._pets

    def claim(self, key: str, new_pet: NewPet) -> Pet | None:
        """The pet to replay for this key and request, or None when the key is new: then it is
        in flight until `remember` or `release`. Raises IdempotencyConflict while it is in
        flight, IdempotencyKeyReused when it was used for another request."""
        if (remembered := self._pets.get(key)) is not None:
            if not same_request(new_pet, remembered[0]):
                raise IdempotencyKeyReused(key)
            return remembered[0]
        if key in self._in_flight:
            raise IdempotencyConflict(key)
        self._in_flight.add(key)
        return None

    def release(self, key: str) -> None:
        """The key's create failed: it is free to be used again."""
        self._in_flight.discard(key)

    def remember(self, key: str, pet: Pet, made_at: int | None = None) -> None:
        """The key's create succeeded (or was loaded, with the time it was made, in seconds)."""
        self._in_flight.discard(key)
        self._pets[key] = (pet, int(self.clock()) if made_at is None else made_at)
        self._forget_old()

    def _forget_old(self) -> None:
        if len(self._pets) <= RETAIN_KEYS:
            return
        too_old = self.clock() - RETAIN_SECONDS
        while len(self._pets) > RETAIN_KEYS:
            key, (_, made_at) = next(iter(self._pets.items()))
            if made_at >= too_old:
                return
            del self._pets[key]

    def clear(self) -> None:
        self._pets.clear()
        self._in_flight.clear()
