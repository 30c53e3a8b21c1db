"""The PostgreSQL store: pets shared by any number of service processes (DatabaseStore)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import typing
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from typing import Final

import asyncpg

import store
from schemas import INT64_MAX, NewPet, Pet, PetStatus, encoder, pet_decoder, stored_pet

logger = logging.getLogger("petstore")

SCHEMA_VERSION: Final = 1
STATEMENT_SECONDS: Final = 10.0

# What an unreachable, stopping or refusing server raises: a 503 while it lasts, and the store
# waits for it to come back. Anything else is a bug and answers 500.
UNAVAILABLE: Final = (
    OSError,  # refused, unreachable, no answer in time (TimeoutError)
    asyncpg.PostgresConnectionError,  # the connection failed or was lost
    asyncpg.InterfaceError,  # the connection closed under a statement
    asyncpg.InternalClientError,  # the driver's state lost with it (asyncpg's issue #1069)
    asyncpg.exceptions.OperatorInterventionError,  # shutting down, starting up, terminated
    asyncpg.exceptions.InsufficientResourcesError,  # disk full, too many connections
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,  # a wrong password
    asyncpg.exceptions.InvalidCatalogNameError,  # no such database (yet)
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # a standby
    asyncpg.exceptions.UndefinedTableError,  # a table renamed away: back when it is
)

# Held while a process makes the tables and seeds them, so that replicas starting together
# don't race (CREATE TABLE IF NOT EXISTS alone is not safe under concurrency).
SCHEMA_LOCK: Final = 0x7065_7473_746F_7265  # "petstore" in ASCII

# One row a pet: `pet` is the Pet as served (a `json` column keeps a name's \u0000, which
# `text` and `jsonb` can't hold), `status` beside it for the index that listPets by status
# walks. `petstore_ids` is one row: the next id and the number of pets.
TABLES: Final = (
    "CREATE TABLE petstore_pets (id bigint PRIMARY KEY, status text, pet json NOT NULL,"
    " idempotency_key text UNIQUE, keyed_at timestamptz)",
    "CREATE INDEX petstore_pets_by_status ON petstore_pets (status, id)",
    "CREATE TABLE petstore_ids (next_id bigint NOT NULL, pets bigint NOT NULL)",
    "INSERT INTO petstore_ids VALUES (1, 0)",
)
# The row lock, held to the commit, orders the creates of every replica: a create takes its id
# only once each lower one committed, so ids become visible in increasing order.
LOCK_IDS: Final = "SELECT next_id FROM petstore_ids FOR UPDATE"
INSERT: Final = """
    WITH counted AS (UPDATE petstore_ids SET next_id = next_id + 1, pets = pets + 1)
    INSERT INTO petstore_pets (id, status, pet, idempotency_key, keyed_at)
    VALUES ($1, $2, $3, $4, CASE WHEN $4::text IS NOT NULL THEN now() END)"""
SEED: Final = """
    WITH counted AS (UPDATE petstore_ids SET next_id = $4, pets = $5)
    INSERT INTO petstore_pets (id, status, pet)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::json[])"""
GET: Final = "SELECT pet FROM petstore_pets WHERE id = $1"
KEYED: Final = "SELECT pet FROM petstore_pets WHERE idempotency_key = $1"
PAGE: Final = "SELECT pet FROM petstore_pets WHERE id > $1 ORDER BY id LIMIT $2"
PAGE_BY_STATUS: Final = """
    SELECT pet FROM petstore_pets WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3"""
# The pet count, cheaply; the always-true NOT EXISTS names petstore_pets too, so that the look
# fails while either table is away.
COUNT: Final = "SELECT pets FROM petstore_ids WHERE NOT EXISTS (SELECT FROM petstore_pets LIMIT 0)"


class DatabaseError(Exception):
    """The database can't be used by this service; the text says why (never the password)."""


def describe(url: str) -> str:
    """The database as messages name it: its hosts and name, never the user or the password."""
    parts = urllib.parse.urlsplit(url)
    socket = ",".join(urllib.parse.parse_qs(parts.query).get("host", []))
    return (parts.netloc.rpartition("@")[2] or socket or "localhost") + (parts.path or "/")


async def _keep_session(connection: asyncpg.Connection[asyncpg.Record]) -> None:
    """No reset query when a connection goes back to the pool: the store leaves no session state
    (no SET or LISTEN), and on a connection the server had just ended it failed committed work."""


class DatabaseStore:
    """Pets in PostgreSQL, one transaction a create; idempotency keys in a unique column."""

    def __init__(self, url: str, seed: Sequence[Pet] = (), *, password: str | None = None) -> None:
        self.url = url
        self.where = describe(url)
        self.seed = list(seed)
        self.secrets = [password, urllib.parse.quote(password, safe="")] if password else []
        self.unwritable: str | None = "The database is unavailable: not connected yet"
        self.count = 0
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._down_since: float | None = None
        self._prepared = False

    async def open(self) -> None:
        """Make the tables ready if the database answers now (DatabaseError for a schema this
        service doesn't know, or a setting refused), then keep looking in the background."""
        self._pool = await asyncpg.create_pool(
            self.url,
            min_size=0,  # no connection yet: the database may be down
            max_size=8,
            timeout=5.0,  # to connect
            command_timeout=STATEMENT_SECONDS,
            reset=_keep_session,
        )
        try:
            await self._look()
        except ValueError as error:  # a setting the driver refuses (an InterfaceError too)
            raise DatabaseError(f"database {self.where}: {self._reason(error)}") from None
        except UNAVAILABLE as error:
            self._went_down(error, "waiting for it")
        except asyncpg.PostgresError as error:  # a setting the server refuses
            raise DatabaseError(f"database {self.where}: {self._reason(error)}") from None
        else:
            self._came_back()
        self._watcher = asyncio.create_task(self._watch(), name="petstore-database-watcher")

    async def close(self) -> None:
        """Stop looking, and let go of the connections: politely if that is quick, else at once."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        if self._pool is not None:
            with contextlib.suppress(TimeoutError):  # the pool then terminates its connections
                async with asyncio.timeout(1.0):  # a hung server never takes the goodbyes
                    await self._pool.close()

    def reset(self) -> int:
        raise store.ResetUnavailable("Pets in a database stay: only the in-memory store resets")

    async def add(self, new_pet: NewPet, key: str | None = None) -> tuple[Pet, bool]:
        async with self._available() as connection, connection.transaction():
            next_id: int = await connection.fetchval(LOCK_IDS)
            # Looked for under the lock: a create with this key that another replica
            # committed is seen, and none can commit meanwhile.
            if key is not None and (made := await connection.fetchval(KEYED, key)):
                pet: Pet = pet_decoder.decode(made)
                if not store.same_request(new_pet, pet):
                    raise store.IdempotencyKeyReused(key)
                return pet, True
            # The counter is a bigint too: ids end one below its last value.
            if next_id >= INT64_MAX:
                raise store.StorageUnavailable(store.IDS_EXHAUSTED)
            pet = stored_pet(next_id, new_pet)
            status = pet.status.value if pet.status else None
            await connection.execute(INSERT, pet.id, status, encoder.encode(pet).decode(), key)
        self.count += 1
        return pet, False

    async def get(self, pet_id: int) -> Pet | None:
        async with self._available() as connection:
            found = await connection.fetchval(GET, pet_id)
        return None if found is None else pet_decoder.decode(found)

    async def page(self, limit: int, status: PetStatus | None, after: int) -> store.Page:
        async with self._available() as connection:
            if status is None:
                rows = await connection.fetch(PAGE, after, limit + 1)
            else:
                rows = await connection.fetch(PAGE_BY_STATUS, status.value, after, limit + 1)
        return store.Page([pet_decoder.decode(row[0]) for row in rows[:limit]], len(rows) > limit)

    @contextlib.asynccontextmanager
    async def _available(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection; StorageUnavailable at once while the database is known to be away (so
        requests don't each wait out a timeout), or when an outage is met on the way."""
        if self.unwritable is not None:
            raise store.StorageUnavailable(self.unwritable)
        try:
            async with self._connection() as connection:
                yield connection
        except UNAVAILABLE as error:
            raise store.StorageUnavailable(self._went_down(error)) from None

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A connection of the pool, closed at once when the driver lost its state or a statement
        was cut off (given back, it would wait for a cancel that a hung server never takes)."""
        assert self._pool is not None
        async with self._pool.acquire() as lent:
            # The pool lends a proxy of a Connection, whose methods it forwards.
            connection = typing.cast(asyncpg.Connection, lent)
            try:
                yield connection
            except (TimeoutError, asyncio.CancelledError, asyncpg.InternalClientError):
                connection.terminate()
                raise

    async def _look(self) -> None:
        """Make the tables ready if that is still to do, and read the pet count."""
        async with self._connection() as connection:
            if not self._prepared:
                await self._prepare(connection)
            self.count = await connection.fetchval(COUNT)

    async def _prepare(self, connection: asyncpg.Connection) -> None:
        """Make the tables or check their schema version; seed a database that never had a pet."""
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            # Made only when missing: CREATE, even IF NOT EXISTS, needs the right to create in
            # the schema, which a role that only uses the tables has no need of.
            if await connection.fetchval("SELECT to_regclass('petstore_schema') IS NULL"):
                await connection.execute("CREATE TABLE petstore_schema (version integer NOT NULL)")
            version = await connection.fetchval("SELECT max(version) FROM petstore_schema")
            if version is None:
                for statement in TABLES:
                    await connection.execute(statement)
                await connection.execute("INSERT INTO petstore_schema VALUES ($1)", SCHEMA_VERSION)
            elif version != SCHEMA_VERSION:
                raise DatabaseError(
                    f"database {self.where}: its schema version is {version}, this service's"
                    f" {SCHEMA_VERSION}; run the petstore that made it"
                )
            if self.seed and await connection.fetchval(LOCK_IDS) == 1:
                await connection.execute(
                    SEED,
                    [pet.id for pet in self.seed],
                    [pet.status.value if pet.status else None for pet in self.seed],
                    [encoder.encode(pet).decode() for pet in self.seed],
                    min(self.seed[-1].id + 1, INT64_MAX),  # the counter, a bigint, stops there
                    len(self.seed),
                    # One statement: given time by its size as well.
                    timeout=STATEMENT_SECONDS + len(self.seed) * 1e-4,
                )
        self._prepared = True

    async def _watch(self) -> None:
        """Look at the database now and then, and at once when a request met an outage."""
        while True:
            self._wake.clear()
            pause = 1.0 if self._down_since is None else 0.25  # sooner during an outage
            # Not wait_for: in Python 3.11 it can lose a cancellation that races with the wake.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await self._wake.wait()
            try:
                await self._look()
            except Exception as error:  # an outage, a schema made newer, a fault of ours: again
                self._went_down(error)
            else:
                self._came_back()

    def _went_down(self, error: BaseException, then: str = "") -> str:
        """Note an outage and its latest cause, which the 503s name; log it when it begins."""
        reason = self._reason(error)
        if self._down_since is None:
            self._down_since = time.monotonic()
            then = then or "creates and reads answer 503 until it is back"
            logger.warning("database %s unavailable (%s); %s", self.where, reason, then)
        self.unwritable = f"The database is unavailable: {reason}"
        self._wake.set()  # look again now: one dropped connection is no outage
        return self.unwritable

    def _came_back(self) -> None:
        if self._down_since is not None:
            lasted = time.monotonic() - self._down_since
            logger.info("database %s available again after %.1f s", self.where, lasted)
        self._down_since = self.unwritable = None

    def _reason(self, error: BaseException) -> str:
        """What went wrong, in words, without the password."""
        if isinstance(error, TimeoutError):
            reason = "no answer in time"
        elif isinstance(error, OSError) and error.strerror:  # [Errno 111] and the like
            reason = f"cannot connect: {error.strerror}"
        else:
            reason = f"{type(error).__name__}: {error}".removesuffix(": ")
        for secret in self.secrets:
            reason = reason.replace(secret, "[redacted]")
        return reason
