"""The store: where pets live, behind one small interface (no HTTP here)."""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from typing import Protocol

from schemas import NewPet, Pet, PetStatus


class StorageUnavailable(Exception):
    """The store can't take this write; nothing was stored and the id is not reused."""


@dataclass(frozen=True, slots=True)
class Page:
    """One page of pets in ascending id order; `has_more` says whether pets follow it."""

    pets: list[Pet]
    has_more: bool


class PetStore(Protocol):
    """What the HTTP layer needs of a store. A file or a database server can stand behind it."""

    async def open(self) -> None:
        """Load whatever the store keeps; called once before the first request."""

    async def close(self) -> None:
        """Finish pending writes and let go of resources; called once at shutdown."""

    @property
    def writable(self) -> bool:
        """Whether `add` can succeed; readiness reports it."""

    async def add(self, new_pet: NewPet) -> Pet:
        """Store a pet under the next id; raises StorageUnavailable when it can't."""

    async def get(self, pet_id: int) -> Pet | None:
        """The pet with this id, or None."""

    async def page(self, *, limit: int, status: PetStatus | None, after: int) -> Page:
        """Up to `limit` pets with id > `after` (and this status, if given), ascending id."""


class PetIndex:
    """Pets by id and, per status, their ids in ascending order.

    Not thread-safe: the caller holds the store's lock. Ids only grow, so every list stays
    sorted by appending, and a page is a bisection plus a slice: O(log n + limit).
    """

    def __init__(self) -> None:
        self._pets: dict[int, Pet] = {}
        self._ids: list[int] = []
        self._ids_by_status: dict[PetStatus, list[int]] = {status: [] for status in PetStatus}

    @property
    def last_id(self) -> int:
        return self._ids[-1] if self._ids else 0

    def __len__(self) -> int:
        return len(self._ids)

    def append(self, pet: Pet) -> None:
        if pet.id <= self.last_id:
            raise ValueError(f"id {pet.id} is not above the last id {self.last_id}")
        self._pets[pet.id] = pet
        self._ids.append(pet.id)
        if isinstance(pet.status, PetStatus):
            self._ids_by_status[pet.status].append(pet.id)

    def get(self, pet_id: int) -> Pet | None:
        return self._pets.get(pet_id)

    def page(self, limit: int, status: PetStatus | None, after: int) -> Page:
        ids = self._ids if status is None else self._ids_by_status[status]
        start = bisect.bisect_right(ids, after)
        chosen = ids[start : start + limit]
        pets = self._pets
        return Page([pets[pet_id] for pet_id in chosen], has_more=start + limit < len(ids))


class MemoryStore:
    """Pets in memory only: fast, and gone when the process ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index = PetIndex()

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    @property
    def writable(self) -> bool:
        return True

    async def add(self, new_pet: NewPet) -> Pet:
        with self._lock:
            pet = Pet(
                id=self._index.last_id + 1,
                name=new_pet.name,
                categoryId=int(new_pet.categoryId),
                status=new_pet.status,
            )
            self._index.append(pet)
        return pet

    async def get(self, pet_id: int) -> Pet | None:
        with self._lock:
            return self._index.get(pet_id)

    async def page(self, *, limit: int, status: PetStatus | None, after: int) -> Page:
        with self._lock:
            return self._index.page(limit, status, after)
