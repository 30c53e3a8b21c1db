"""Idempotency keys: which keyed create made which pet, and how long that is remembered."""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import time
from collections.abc import Callable, Sequence
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


class KeysInFlight:
    """The Idempotency-Keys of the creates this process is answering, each from its request's
    head (through a delay the test-control plane holds it for, a body that comes slowly) to
    its answer: another create with one of them meanwhile is the contract's 409, whatever it
    asks (a retry sent while its first was held by a delay made the pet, and the first came
    back a replay)."""

    def __init__(self) -> None:
        self._keys: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def hold(self, key: str) -> Callable[[], None]:
        """Hold the key, and give what lets it go; IdempotencyConflict while it is held."""
        if key in self._keys:
            raise IdempotencyConflict(key)
        self._keys.add(key)
        return functools.partial(self._keys.discard, key)


class IdempotencyKeys:
    """The remembered keys with their pets, oldest first, and the keys whose first create is in
    flight. When each key was made is kept by the second and run-length encoded (keys made in
    the same second share one [second, count] run), so a million keys loaded from a file made
    over a few hours take a few runs, not a million integers. Not thread-safe: the caller holds
    its store's lock."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._pets: dict[str, Pet] = {}
        self._order: collections.deque[str] = collections.deque()  # oldest first
        self._seconds: collections.deque[list[int]] = collections.deque()  # [second, keys]
        self._in_flight: set[str] = set()

    def __len__(self) -> int:
        return len(self._pets)

    def __contains__(self, key: str) -> bool:
        return key in self._pets

    def replay(self, key: str, new_pet: NewPet) -> Pet | None:
        """The pet to replay for this key and request, or None when the key is not remembered;
        IdempotencyKeyReused when it was used for another request."""
        if (pet := self._pets.get(key)) is not None and not same_request(new_pet, pet):
            raise IdempotencyKeyReused(key)
        return pet

    def claim(self, key: str, new_pet: NewPet) -> Pet | None:
        """`replay`, and when the key is new, mark it in flight until `remember` or `release`
        (for a store whose create awaits); IdempotencyConflict while it is in flight."""
        if (pet := self.replay(key, new_pet)) is not None:
            return pet
        if key in self._in_flight:
            raise IdempotencyConflict(key)
        self._in_flight.add(key)
        return None

    def release(self, key: str) -> None:
        """The key's create failed: it is free to be used again."""
        self._in_flight.discard(key)

    def remember(self, key: str, pet: Pet, made_at: int | None = None) -> None:
        """The key's create succeeded (`replay` or `claim` found the key new): its pet is
        remembered. `made_at`: the second its data-file line records, else now."""
        self._in_flight.discard(key)
        self._pets[key] = pet
        now = self.clock()
        second = int(now) if made_at is None else made_at
        self._order.append(key)
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1][1] += 1
        else:
            self._seconds.append([second, 1])
        if len(self._pets) > RETAIN_KEYS and self._seconds[0][0] < now - RETAIN_SECONDS:
            self._forget_old(now - RETAIN_SECONDS)

    def load(self, keyed: Sequence[tuple[str, Pet, int]]) -> int | None:
        """Remember the keys read from a data file (key, pet, second made), in the file's order,
        into the empty set of keys, all at once (a million of them in C, mostly); the position
        of the first key given twice (damage: the load fails), else None. A key may be given
        again once it could have been forgotten (see `_reused`): the later line is the one."""
        if self._pets:
            raise RuntimeError("load() fills an empty set of keys")
        keys = list(map(operator.itemgetter(0), keyed))
        self._pets.update(zip(keys, map(operator.itemgetter(1), keyed), strict=True))
        if len(self._pets) != len(keys):  # a key given twice: forgotten between, or damage
            twice, keyed = _reused(keyed)
            if twice is not None:
                return twice
            keys = list(map(operator.itemgetter(0), keyed))
        self._order.extend(keys)
        for second, same in itertools.groupby(map(operator.itemgetter(2), keyed)):
            count = len(list(same))
            if self._seconds and self._seconds[-1][0] == second:
                self._seconds[-1][1] += count
            else:
                self._seconds.append([second, count])
        self._forget_old(self.clock() - RETAIN_SECONDS)
        return None

    def _forget_old(self, too_old: float) -> None:
        while len(self._pets) > RETAIN_KEYS and self._seconds[0][0] < too_old:
            del self._pets[self._order.popleft()]
            oldest = self._seconds[0]
            oldest[1] -= 1
            if not oldest[1]:
                self._seconds.popleft()

    def clear(self) -> None:
        self._pets.clear()
        self._order.clear()
        self._seconds.clear()
        self._in_flight.clear()


def _reused(
    keyed: Sequence[tuple[str, Pet, int]],
) -> tuple[int | None, Sequence[tuple[str, Pet, int]]]:
    """The keyed lines of a file in which a key comes twice: the position of a key given
    again before it could have been forgotten (damage), or the lines without those whose key
    a later line took again. A service forgets a key (then free for another create) once it
    is older than RETAIN_SECONDS and RETAIN_KEYS newer keyed creates came after it; the file
    keeps both lines, and refusing it had left a file the service wrote and would not load."""
    last: dict[str, int] = {}
    replaced: set[int] = set()
    for position, (key, _, second) in enumerate(keyed):
        earlier = last.get(key)
        if earlier is not None:
            if position - earlier <= RETAIN_KEYS or keyed[earlier][2] > second - RETAIN_SECONDS:
                return position, keyed
            replaced.add(earlier)
        last[key] = position
    return None, [line for position, line in enumerate(keyed) if position not in replaced]
