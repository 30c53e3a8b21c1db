"""The store interface (PetStore), the in-memory index both stores read from, and MemoryStore."""

from __future__ import annotations

import bisect
import operator
import threading
from collections.abc import Sequence
from typing import Final, NamedTuple, Protocol

import msgspec

from idempotency import IdempotencyKeys
from schemas import INT64_MAX, NewPet, Pet, PetStatus, SeedPet, stored_pet


class StorageUnavailable(Exception):
    """The store can't take this write; the id is not reused. Nothing was stored, unless the
    message says it may have been (MAYBE, MAYBE_KEYLESS)."""


def may_have_been_stored(reason: str, key: str | None) -> StorageUnavailable:
    """What a create is told whose write may have landed all the same (a commit that went
    unanswered, a failed fsync whose lines could not be cut off): why, and how to retry it,
    with its Idempotency-Key or without one."""
    if key is not None:
        return StorageUnavailable(f"{reason}; {MAYBE}")
    return StorageUnavailable(f"{reason}; {MAYBE_KEYLESS}")


MAYBE: Final = "this create may have been stored: retry it with its Idempotency-Key"
MAYBE_KEYLESS: Final = (
    "this create may have been stored: look for it before sending it again (a create sent with"
    " an Idempotency-Key is retried safely)"
)


# What a create past the last id answers (a 503): ids are positive int64s, and one past it
# would be stored but refused by getPet and by the next start's load.
IDS_EXHAUSTED: Final = f"Every id up to {INT64_MAX} is taken: no pet can be added"


class ResetUnavailable(Exception):
    """This store never deletes pets, so it can't go back to its start."""


class Added(NamedTuple):
    """What a create came to: the pet, and whether an earlier create with the same
    Idempotency-Key and request made it (then nothing new was stored)."""

    pet: Pet
    replayed: bool = False


class Page(msgspec.Struct, frozen=True):
    """One page of pets in ascending id order; `has_more` says whether pets follow it."""

    pets: list[Pet]
    has_more: bool


class PetStore(Protocol):
    """What the HTTP layer needs of a store. A file or a database server can stand behind it."""

    def seed(self, pets: Sequence[SeedPet]) -> bool:
        """Store these pets if the store is empty (before serving); whether it did."""

    def reset(self) -> int:
        """Back to the state right after start (the seed, ids included); how many pets that is.
        Raises ResetUnavailable where pets are never deleted (a data file, a database)."""

    async def open(self) -> None:
        """Get ready to serve; called once before the first request."""

    async def close(self) -> None:
        """Finish pending writes and let go of resources; called once at shutdown."""

    @property
    def unwritable(self) -> str | None:
        """None while `add` can succeed, else why it can't: what /readyz answers (its 503's
        message) and the metrics' petstore_store_writable report."""

    @property
    def count(self) -> int:
        """How many pets are stored (the metrics' gauge): cheap, no lock."""

    async def add(self, new_pet: NewPet, idempotency_key: str | None = None) -> Added:
        """Store a pet under the next id, or, for a key a create already used with this
        request, give back that create's pet. Raises StorageUnavailable when it can't store,
        IdempotencyConflict while the key's first create is in flight, IdempotencyKeyReused
        when the key came with another request. With a key, the pet and its key are made
        durable together, never apart."""

    async def get(self, pet_id: int) -> Pet | None:
        """The pet with this id, or None."""

    async def page(self, *, limit: int, status: PetStatus | None, after: int) -> Page:
        """Up to `limit` pets with id > `after` (and this status, if given), ascending id."""


_ID: Final = operator.attrgetter("id")


class PetIndex:
    """Pets in ascending id order, and each status's pets in the same order.

    Not thread-safe: the caller holds the store's lock. Ids only grow, so appending keeps every
    list sorted; a lookup is a bisection and a page a bisection plus a slice, O(log n + limit).
    Lists of references rather than dicts keep a stored pet near 170 bytes.
    """

    def __init__(self) -> None:
        self._pets: list[Pet] = []
        self._pets_by_status: dict[PetStatus, list[Pet]] = {status: [] for status in PetStatus}

    @property
    def last_id(self) -> int:
        return self._pets[-1].id if self._pets else 0

    def __len__(self) -> int:
        return len(self._pets)

    def append(self, pet: Pet) -> None:
        if pet.id <= self.last_id:
            raise ValueError(f"id {pet.id} is not above the last id {self.last_id}")
        self._pets.append(pet)
        if isinstance(pet.status, PetStatus):
            self._pets_by_status[pet.status].append(pet)

    def extend(self, pets: Sequence[Pet]) -> None:
        """Append pets whose ids strictly increase (the caller checked them), all at once: a
        data file of a million pets loads in a few list operations, not a million appends."""
        if pets and pets[0].id <= self.last_id:
            raise ValueError(f"id {pets[0].id} is not above the last id {self.last_id}")
        self._pets.extend(pets)
        for status, pets_of_status in self._pets_by_status.items():
            pets_of_status.extend([pet for pet in pets if pet.status is status])

    def get(self, pet_id: int) -> Pet | None:
        pets = self._pets
        # Ids are 1, 2, 3... unless failed writes left gaps: look where that puts it first.
        position = pet_id - 1
        if 0 <= position < len(pets) and pets[position].id == pet_id:
            return pets[position]
        position = bisect.bisect_left(pets, pet_id, key=_ID)
        if position < len(pets) and pets[position].id == pet_id:
            return pets[position]
        return None

    def page(self, limit: int, status: PetStatus | None, after: int) -> Page:
        pets = self._pets if status is None else self._pets_by_status[status]
        start = bisect.bisect_right(pets, after, key=_ID) if after else 0  # ids start at 1
        return Page(pets[start : start + limit], has_more=start + limit < len(pets))


def seed_pets(seed: Sequence[SeedPet], last_id: int) -> list[Pet]:
    """Seed items as Pets: a given id is kept (it must be above the one before), else the next."""
    pets = []
    for number, item in enumerate(seed):
        pet_id = last_id + 1 if item.id is msgspec.UNSET else int(item.id)
        if pet_id <= last_id:
            raise ValueError(f"item {number}: id {pet_id} is not above the id {last_id} before it")
        pets.append(stored_pet(pet_id, item))
        last_id = pet_id
    return pets


class IndexedReads:
    """The reads both stores serve from memory: one lock, held for a lookup or a slice."""

    _lock: threading.Lock
    _index: PetIndex

    @property
    def count(self) -> int:
        return len(self._index)  # len of a list: atomic, so no lock

    async def get(self, pet_id: int) -> Pet | None:
        with self._lock:
            return self._index.get(pet_id)

    async def page(self, *, limit: int, status: PetStatus | None, after: int) -> Page:
        with self._lock:
            return self._index.page(limit, status, after)


class MemoryStore(IndexedReads):
    """Pets in memory only: fast, and gone when the process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index = PetIndex()
        self._keys = IdempotencyKeys()
        self._seeded: list[Pet] = []  # what reset() goes back to

    def seed(self, pets: Sequence[SeedPet]) -> bool:
        with self._lock:
            if len(self._index):
                return False
            self._seeded = seed_pets(pets, self._index.last_id)
            for pet in self._seeded:
                self._index.append(pet)
        return True

    def reset(self) -> int:
        index = PetIndex()
        for pet in self._seeded:
            index.append(pet)
        with self._lock:
            self._index = index
            self._keys.clear()
        return len(index)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    @property
    def unwritable(self) -> str | None:
        return IDS_EXHAUSTED if self._index.last_id >= INT64_MAX else None

    async def add(self, new_pet: NewPet, idempotency_key: str | None = None) -> Added:
        with self._lock:
            # Nothing is ever in flight here: the create is done at once, under the lock.
            if idempotency_key is not None and (
                made := self._keys.replay(idempotency_key, new_pet)
            ):
                return Added(made, replayed=True)
            if (refused := self.unwritable) is not None:
                raise StorageUnavailable(refused)
            pet = stored_pet(self._index.last_id + 1, new_pet)
            self._index.append(pet)
            if idempotency_key is not None:
                self._keys.remember(idempotency_key, pet)
        return Added(pet)
