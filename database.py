"""The database: pets in PostgreSQL, shared by any number of service processes (DatabaseStore)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import asyncpg
import msgspec

from idempotency import IdempotencyConflict, IdempotencyKeyReused, same_request
from redaction import redact
from schemas import NewPet, Pet, PetStatus, SeedPet, encoder, pet_decoder, stored_pet
from store import IDS_EXHAUSTED, Added, Page, ResetUnavailable, StorageUnavailable
from store import may_have_been_stored as told_maybe  # _fail has a flag of that name
from tables import (
    COUNT,
    CREATE,
    GET,
    GIVE_UP_ON,
    KEYED,
    PAGE,
    PAGE_BY_STATUS,
    PET_START,
    STATEMENT_SECONDS,
    UNAVAILABLE,
    UNCOUNT,
    Connection,
    DatabaseError,
    answered,
    given_up,
    prepare,
    status_column,
)

logger = logging.getLogger("petstore.store")

CONNECT_SECONDS: Final = 5.0
CLOSE_SECONDS: Final = 1.0  # the pool's goodbyes at shutdown, at most
_NOT_READY: Final = "The database is unavailable: not ready yet"
POOL_SIZE: Final = 8
PROBE_SECONDS: Final = 1.0  # how often readiness and the pet count are checked
RETRY_SECONDS: Final = 0.25  # how often, during an outage, whether it is over


@dataclass(slots=True)
class _Create:
    new_pet: NewPet
    key: str | None
    done: asyncio.Future[Pet | None]  # None: another replica stored a create with this key
    made_at: datetime.datetime | None = None


class DatabaseStore:
    """Pets in PostgreSQL. Any number of processes share one database.

    Ids become visible in increasing order across every replica, which a sequence can't give
    (id 7 may commit before id 6, and a reader paging with `after=7` would never see 6). Each
    process has one writer task that takes every create queued since its last commit and, in
    one statement (tables.CREATE), reserves a block of ids from the `petstore_ids` row and
    inserts the batch, committed as it ends. The row stays locked until that commit, so a block
    with higher ids commits after every lower one; and concurrent creates share one commit (group
    commit, as the data file does). Idempotency keys are a unique column: a retry sent to another
    replica finds its key there.
    """

    def __init__(
        self, url: str, seed: Sequence[SeedPet] = (), *, where: str, password: str | None
    ) -> None:
        self.url = url
        self.where = where  # the database as logs name it (database_url.describe)
        self._password = password  # the driver's (the URL's or PGPASSWORD's), kept out of errors
        self._seed = seed
        self._prepared = False  # the tables are there, with our schema version
        self._fatal: str | None = None  # a newer schema, found after the start
        self._outage: str | None = None
        self._outage_began = 0.0
        self._count = 0
        self._pending: list[_Create] = []
        self._in_flight: set[str] = set()  # keys whose create this process has queued
        self._pool: asyncpg.Pool | None = None
        self._writer: asyncio.Task[None] | None = None
        self._probe: asyncio.Task[None] | None = None
        self._wake_writer = asyncio.Event()
        self._wake_probe = asyncio.Event()
        self._closing = False

    # Before serving.

    def prepare_now(self) -> None:
        """Make the tables (and seed them) before the service listens, so that a newer schema
        stops the start; if the database can't be reached, say so once and let the service
        start anyway (readyz 503 until it is back). Runs its own event loop in a thread: the
        caller may be inside uvicorn's."""
        with concurrent.futures.ThreadPoolExecutor(1) as thread:
            thread.submit(asyncio.run, self._prepare_once()).result()

    async def _prepare_once(self) -> None:
        # What the driver or the server refuses for good (the URL's parameters: a bad sslmode,
        # a setting the server doesn't know) is a bad setting: one line, exit 2. The driver's
        # ClientConfigurationError is an InterfaceError too, which UNAVAILABLE holds: first.
        try:
            connection = await asyncpg.connect(
                self.url, timeout=CONNECT_SECONDS, command_timeout=STATEMENT_SECONDS
            )
        except (ValueError, asyncpg.ClientConfigurationError) as error:
            raise DatabaseError(f"database {self.where}: {self._reason(error)}") from None
        except UNAVAILABLE as error:
            self._went_down(error, "waiting for it")
            return
        except asyncpg.PostgresError as error:
            raise DatabaseError(f"database {self.where}: {self._reason(error)}") from None
        try:
            await self._prepare(connection)
        except UNAVAILABLE as error:
            self._went_down(error, "waiting for it")
        except asyncpg.PostgresError as error:
            raise DatabaseError(f"database {self.where}: {self._reason(error)}") from None
        finally:
            with contextlib.suppress(*UNAVAILABLE):
                await connection.close(timeout=CONNECT_SECONDS)

    async def _prepare(self, connection: Connection) -> None:
        """Make the tables ready (tables.prepare); from then on the store can serve."""
        await prepare(connection, self.where, self._seed)
        self._prepared = True

    def seed(self, pets: Sequence[SeedPet]) -> bool:
        """Never called by opening.py, which hands the seed to the constructor: `prepare_now`
        (or the first connection once the database is back) seeds an empty database."""
        self._seed = pets
        return False

    def reset(self) -> int:
        raise ResetUnavailable(
            "Only the in-memory store can be reset: pets in a database are never deleted"
        )

    # Serving.

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(
            self.url,
            min_size=0,  # no connection at creation: the database may be down
            max_size=POOL_SIZE,
            timeout=CONNECT_SECONDS,
            command_timeout=STATEMENT_SECONDS,
            reset=_keep_session,
        )
        self._writer = asyncio.create_task(self._write_loop(), name="petstore-database-writer")
        self._probe = asyncio.create_task(self._probe_loop(), name="petstore-database-probe")

    async def close(self) -> None:
        """Commit what is queued (each statement cut off after its 10 s), then let go of the
        pool: at once over a database known to be away, whose connections would not say
        goodbye, else within CLOSE_SECONDS. The probe is cancelled, not waited out (its look
        may take a statement's 10 s for nothing): its connection is closed at once."""
        self._closing = True
        self._wake_writer.set()
        tasks = [task for task in (self._writer, self._probe) if task is not None]
        if self._probe is not None:
            self._probe.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._pool is None:
            return
        if self._outage is not None:
            self._pool.terminate()
            return
        try:  # a server that answers says goodbye in milliseconds; one that stopped, never
            await asyncio.wait_for(self._pool.close(), CLOSE_SECONDS)
        except TimeoutError:
            self._pool.terminate()

    @property
    def unwritable(self) -> str | None:
        if self._fatal is not None:
            return self._fatal
        if self._outage is not None or not self._prepared:
            return f"The database is unavailable: {self._outage}" if self._outage else _NOT_READY
        return None

    @property
    def count(self) -> int:
        return self._count

    def _pool_or_refuse(self) -> asyncpg.Pool:
        """The pool, or StorageUnavailable at once while the database is known to be away:
        the probe finds out when it is back, and requests don't each wait for a timeout."""
        if (problem := self.unwritable) is not None or self._pool is None:
            raise StorageUnavailable(problem or _NOT_READY)
        return self._pool

    async def get(self, pet_id: int) -> Pet | None:
        pool = self._pool_or_refuse()
        try:
            found = await answered(pool, "fetchval", GET, pet_id)
        except UNAVAILABLE as error:
            raise self._unavailable(error) from None
        return None if found is None else pet_decoder.decode(found)

    async def page(self, *, limit: int, status: PetStatus | None, after: int) -> Page:
        pool = self._pool_or_refuse()
        try:
            if status is None:
                rows = await answered(pool, "fetch", PAGE, after, limit + 1)
            else:
                rows = await answered(pool, "fetch", PAGE_BY_STATUS, status.value, after, limit + 1)
        except UNAVAILABLE as error:
            raise self._unavailable(error) from None
        pets = [pet_decoder.decode(row[0]) for row in rows[:limit]]
        return Page(pets, has_more=len(rows) > limit)

    async def add(self, new_pet: NewPet, idempotency_key: str | None = None) -> Added:
        pool = self._pool_or_refuse()
        key = idempotency_key
        if key is not None:
            if key in self._in_flight:
                raise IdempotencyConflict(key)
            if (made := await self._keyed(pool, key, new_pet)) is not None:
                return Added(made, replayed=True)
            if key in self._in_flight:  # queued by another request while we looked
                raise IdempotencyConflict(key)
            self._in_flight.add(key)
        create = _Create(new_pet, key, asyncio.get_running_loop().create_future())
        if key is not None:
            create.made_at = datetime.datetime.now(datetime.UTC)
        self._pending.append(create)
        self._wake_writer.set()
        try:
            pet = await create.done
        finally:
            if key is not None:
                self._in_flight.discard(key)
        if pet is not None:
            return Added(pet)
        # Another replica committed this key between our look and our insert: its pet it is.
        assert key is not None  # only a keyed create can meet a conflict
        made = await self._keyed(pool, key, new_pet)
        if made is None:  # its pet can't vanish: pets are never deleted
            raise StorageUnavailable("The database lost a committed idempotency key")
        return Added(made, replayed=True)

    async def _keyed(self, pool: asyncpg.Pool, key: str, new_pet: NewPet) -> Pet | None:
        """The pet a create with this key made, None if none did; IdempotencyKeyReused when
        it was made from another request."""
        try:
            found = await answered(pool, "fetchval", KEYED, key)
        except UNAVAILABLE as error:
            raise self._unavailable(error) from None
        if found is None:
            return None
        pet: Pet = pet_decoder.decode(found)
        if not same_request(new_pet, pet):
            raise IdempotencyKeyReused(key)
        return pet

    # The writer and the probe, tasks on the service's event loop.

    async def _write_loop(self) -> None:
        """Commit what is queued, batch after batch; wait only when nothing is: a wake-up
        (close()'s too) that came during a slow commit would be slept through for good."""
        while True:
            if not self._pending:
                if self._closing:
                    return
                await self._wake_writer.wait()
                self._wake_writer.clear()
                continue
            batch, self._pending = self._pending, []
            try:
                if (problem := self.unwritable) is not None:  # queued behind a failed commit
                    raise StorageUnavailable(problem)
                pets = await self._commit(batch)
            except UNAVAILABLE as error:  # the commit may have happened, unanswered: say so
                _fail(batch, self._unavailable(error), maybe_stored=True)
            except Exception as error:  # every id taken (a 503); else a bug: 500s, and go on
                _fail(batch, error)
            else:
                for create, pet in zip(batch, pets, strict=True):
                    if not create.done.done():  # else the client left; the pet is stored
                        create.done.set_result(pet)

    async def _commit(self, batch: list[_Create]) -> list[Pet | None]:
        """Store the batch with one statement (see tables.CREATE). A keyed create whose key
        another replica committed meanwhile is not inserted (None); its id stays unused."""
        assert self._pool is not None
        # Id 0: the database puts the id in front of the rest of the JSON.
        pets = [stored_pet(0, create.new_pet) for create in batch]
        row = await answered(
            self._pool,
            "fetchrow",
            CREATE,
            len(batch),
            [status_column(pet.status) for pet in pets],
            [encoder.encode(pet)[PET_START:].decode() for pet in pets],
            [create.key for create in batch],
            [create.made_at for create in batch],
        )
        assert row is not None  # the statement's one row
        first, ids = row
        if first is None:  # no block of this size is left below the last id
            raise StorageUnavailable(IDS_EXHAUSTED)
        if len(ids) < len(batch):  # rare: two replicas raced with one key
            # A statement of its own, so for a moment the count (a gauge) is too high; the
            # batch is committed whatever becomes of it, so its failure fails no create.
            with contextlib.suppress(*UNAVAILABLE):
                await answered(self._pool, "execute", UNCOUNT, len(batch) - len(ids))
        self._count += len(ids)
        pets = [msgspec.structs.replace(pet, id=first + n) for n, pet in enumerate(pets)]
        stored = set(ids)
        return [pet if pet.id in stored else None for pet in pets]

    async def _probe_loop(self) -> None:
        """Make the tables once the database is reachable (if the start couldn't), then check
        every second that it still answers (readiness) and read the pet count (the metrics);
        during an outage, check every quarter of a second."""
        assert self._pool is not None
        while not self._closing:
            try:
                if not self._prepared:
                    async with self._pool.acquire() as connection:
                        try:
                            await self._prepare(connection)
                        except GIVE_UP_ON as error:  # as tables.answered
                            raise given_up(connection, error) from None
                self._count = await answered(self._pool, "fetchval", COUNT)
            except DatabaseError as error:
                logger.error("%s", error)
                self._fatal = f"The service can't use this database: {error}"
                return
            except UNAVAILABLE as error:
                self._went_down(error)
            except Exception as error:  # a bug: said, and tried again as after an outage
                if self._outage is None:
                    logger.exception("database %s: checking it failed", self.where)
                self._went_down(error)
            else:
                self._came_back()
            self._wake_probe.clear()
            with contextlib.suppress(TimeoutError):
                seconds = PROBE_SECONDS if self._outage is None else RETRY_SECONDS
                await asyncio.wait_for(self._wake_probe.wait(), seconds)

    # Outages: one line when one begins, one when it ends.

    def _unavailable(self, error: BaseException) -> StorageUnavailable:
        self._went_down(error)
        self._wake_probe.set()  # look again at once: a single dropped connection is no outage
        return StorageUnavailable(f"The database is unavailable: {self._outage}")

    def _went_down(
        self, error: BaseException, then: str = "creates and reads answer 503 until it is back"
    ) -> None:
        """Note the outage's cause: logged when it begins; the 503s name the latest one (a
        server shutting down, then refusing connections)."""
        known, self._outage = self._outage, self._reason(error)
        if known is None:
            self._outage_began = time.monotonic()
            logger.warning("database %s unavailable (%s); %s", self.where, self._outage, then)

    def _came_back(self) -> None:
        if self._outage is None:
            return
        lasted = time.monotonic() - self._outage_began
        self._outage = None
        logger.info("database %s available again after %.1f s", self.where, lasted)

    def _reason(self, error: BaseException) -> str:
        if isinstance(error, OSError) and error.strerror:  # [Errno 2] on a missing socket file
            reason = f"cannot connect: {error.strerror}"
        elif isinstance(error, TimeoutError):
            reason = "no answer in time"
        else:
            reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        return redact(reason, (self._password,)) if self._password else reason


def _fail(batch: list[_Create], error: BaseException, *, maybe_stored: bool = False) -> None:
    """Each create of the batch still waited for gets `error`; or, when its commit may have
    happened unanswered, a 503 that says so, and how to retry it."""
    for create in batch:
        if not create.done.done():
            told = told_maybe(str(error), create.key) if maybe_stored else error
            create.done.set_exception(told)


async def _keep_session(connection: asyncpg.Connection) -> None:
    """Nothing to undo when a connection goes back to the pool: the store sets no session state
    (no SET, LISTEN, cursor or session lock; asyncpg still rolls back an open transaction).
    asyncpg's default reset is one more round trip a query: measured, it halves the reads."""
