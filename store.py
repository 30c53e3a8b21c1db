"""The store interface (PetStore), the in-memory index and keys every store keeps, MemoryStore."""

from __future__ import annotations

import bisect
import operator
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final, NamedTuple, Protocol

import msgspec

from schemas import INT64_MAX, ApiError, ErrorCode, NewPet, Pet, PetStatus, SeedPet, stored_pet

# A key is forgotten once it is older than this and this many newer keyed creates followed it.
RETAIN_SECONDS: Final = 24 * 60 * 60
RETAIN_KEYS: Final = 100_000
IDS_EXHAUSTED: Final = f"Every id up to {INT64_MAX} is taken: no pet can be added"
_ID: Final = operator.attrgetter("id")


class StorageUnavailable(ApiError):
    def __init__(self, reason: str) -> None:
        super().__init__(503, ErrorCode.STORAGE_UNAVAILABLE, reason)


class ResetUnavailable(ApiError):
    def __init__(self, reason: str) -> None:
        super().__init__(409, ErrorCode.RESET_UNAVAILABLE, reason)


class IdempotencyConflict(ApiError):
    def __init__(self, key: str) -> None:
        message = "The first create with this Idempotency-Key is still in flight; retry later"
        super().__init__(409, ErrorCode.IDEMPOTENCY_CONFLICT, message)


class IdempotencyKeyReused(ApiError):
    def __init__(self, key: str) -> None:
        message = "This Idempotency-Key was used with a different request"
        super().__init__(422, ErrorCode.IDEMPOTENCY_KEY_REUSED, message)


class Page(NamedTuple):
    """Pets in ascending id order; `has_more` says whether more follow."""

    pets: list[Pet]
    has_more: bool


class PetStore(Protocol):
    """What the HTTP layer needs of a store: memory, a data file or a database behind it."""

    seed: list[Pet]  # the pets it starts from, and a new tenant unless it brings its own

    async def open(self) -> None:
        """Load or connect, and seed an empty store; called once before the first request."""

    async def close(self) -> None:
        """Finish pending writes and let go of resources; called once at shutdown."""

    def reset(self) -> int:
        """Back to the state right after start, ids included: how many pets; or ResetUnavailable."""

    @property
    def unwritable(self) -> str | None:
        """None while creates can succeed, else why not (/readyz's 503 says it)."""

    @property
    def count(self) -> int:
        """How many pets are stored, without a lock."""

    async def add(self, new_pet: NewPet, key: str | None = None) -> tuple[Pet, bool]:
        """(The pet stored under the next id, False), or for a key used with this request (the pet
        it made, True); pet and key are made durable together. Raises the ApiErrors above."""

    async def get(self, pet_id: int) -> Pet | None:
        """The pet with this id, or None."""

    async def page(self, limit: int, status: PetStatus | None, after: int) -> Page:
        """Up to `limit` pets with id > `after` (and this status, if given), ascending id."""


def seed_pets(items: Sequence[SeedPet]) -> list[Pet]:
    """Seed items as Pets: a given id is kept (it must be above the one before), else the next."""
    pets: list[Pet] = []
    for number, item in enumerate(items):
        last = pets[-1].id if pets else 0
        pet_id = last + 1 if item.id is msgspec.UNSET else int(item.id)
        if pet_id <= last:
            raise ValueError(f"item {number}: id {pet_id} is not above the id {last} before it")
        pets.append(stored_pet(pet_id, item))
    return pets


class PetIndex:
    """Pets, and each status's pets, in ascending id order; the caller holds its store's lock.
    Ids only grow, so appends keep every list sorted and a page is a bisection and a slice."""

    def __init__(self, pets: Sequence[Pet] = ()) -> None:
        self.pets: list[Pet] = []
        self.by_status: dict[PetStatus, list[Pet]] = {status: [] for status in PetStatus}
        self.extend(pets)

    @property
    def last_id(self) -> int:
        return self.pets[-1].id if self.pets else 0

    def extend(self, pets: Sequence[Pet]) -> None:
        """Append pets whose ids increase past the last one (the caller checked)."""
        self.pets.extend(pets)
        for status, of_status in self.by_status.items():
            of_status.extend([pet for pet in pets if pet.status is status])

    def append(self, pet: Pet) -> None:
        """Append one pet past the last one: a create's, the hot path of extend."""
        self.pets.append(pet)
        if pet.status is not msgspec.UNSET:
            self.by_status[pet.status].append(pet)

    def get(self, pet_id: int) -> Pet | None:
        if 0 < pet_id <= len(self.pets) and self.pets[pet_id - 1].id == pet_id:
            return self.pets[pet_id - 1]  # ids 1, 2, 3...: where it is unless writes failed
        position = bisect.bisect_left(self.pets, pet_id, key=_ID)
        if position < len(self.pets) and self.pets[position].id == pet_id:
            return self.pets[position]
        return None

    def page(self, limit: int, status: PetStatus | None, after: int) -> Page:
        pets = self.pets if status is None else self.by_status[status]
        start = bisect.bisect_right(pets, after, key=_ID) if after else 0
        return Page(pets[start : start + limit], start + limit < len(pets))


def same_request(new_pet: NewPet, pet: Pet) -> bool:
    """Whether `new_pet` asks for what `pet` was made from: the pet is the request plus an id."""
    return stored_pet(pet.id, new_pet) == pet


class IdempotencyKeys:
    """Which keyed create made which pet, oldest first, and the keys in flight; under a lock."""

    def __init__(self) -> None:
        self.made: OrderedDict[str, tuple[Pet, float]] = OrderedDict()
        self.in_flight: set[str] = set()

    def claim(self, key: str, new_pet: NewPet) -> Pet | None:
        """The pet this key made for this request, or None: the key is new, and now in flight."""
        if (made := self.made.get(key)) is not None:
            if not same_request(new_pet, made[0]):
                raise IdempotencyKeyReused(key)
            return made[0]
        if key in self.in_flight:
            raise IdempotencyConflict(key)
        self.in_flight.add(key)
        return None

    def release(self, key: str) -> None:
        """The key's create failed: the key is free again."""
        self.in_flight.discard(key)

    def remember(self, key: str, pet: Pet, made_at: float | None = None) -> None:
        """The key's create succeeded; `made_at` is when (a loaded line's time), else now."""
        self.in_flight.discard(key)
        self.made[key] = (pet, time.time() if made_at is None else made_at)
        self.made.move_to_end(key)
        too_old = time.time() - RETAIN_SECONDS
        while len(self.made) > RETAIN_KEYS and next(iter(self.made.values()))[1] < too_old:
            self.made.popitem(last=False)


class MemoryStore:
    """Pets in memory only: fast, and gone when the process ends."""

    def __init__(self, seed: Sequence[Pet] = ()) -> None:
        self.lock = threading.Lock()
        self.seed = list(seed)
        self.index = PetIndex(self.seed)
        self.keys = IdempotencyKeys()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def reset(self) -> int:
        with self.lock:
            self.index = PetIndex(self.seed)
            self.keys = IdempotencyKeys()
        return len(self.seed)

    @property
    def unwritable(self) -> str | None:
        return IDS_EXHAUSTED if self.index.last_id >= INT64_MAX else None

    @property
    def count(self) -> int:
        return len(self.index.pets)

    def claim(self, new_pet: NewPet, key: str | None) -> Pet | None:
        """The pet to replay for `key` (even while creates fail), or None: the create goes on."""
        if key is not None and (made := self.keys.claim(key, new_pet)) is not None:
            return made
        if (problem := self.unwritable) is not None:
            self.keys.release(key or "")
            raise StorageUnavailable(problem)
        return None

    async def add(self, new_pet: NewPet, key: str | None = None) -> tuple[Pet, bool]:
        with self.lock:
            if (made := self.claim(new_pet, key)) is not None:
                return made, True
            pet = stored_pet(self.index.last_id + 1, new_pet)
            self.index.append(pet)
            if key is not None:
                self.keys.remember(key, pet)
        return pet, False

    async def get(self, pet_id: int) -> Pet | None:
        with self.lock:
            return self.index.get(pet_id)

    async def page(self, limit: int, status: PetStatus | None, after: int) -> Page:
        with self.lock:
            return self.index.page(limit, status, after)
