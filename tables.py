"""The database's tables: their schema and version, every statement on them and how it runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final, Literal

import asyncpg

from schemas import INT64_MAX, Pet, PetStatus, SeedPet, encoder
from store import seed_pets

logger = logging.getLogger("petstore.store")
# A connection of its own (at the start) or one the pool lends.
Connection = asyncpg.Connection | asyncpg.pool.PoolConnectionProxy
SCHEMA_VERSION: Final = 1
STATEMENT_SECONDS: Final = 10.0  # the pool's statement timeout


class ConnectionLost(Exception):
    """A connection the server ended in the middle of an operation (pg_terminate_backend, a
    failover), whose next statement found the driver's state broken: asyncpg says "cannot
    switch to state 12; another operation (2) is in progress" (its issue #1069), an
    InternalClientError, the class of its own bugs too (a codec's), which stay 500s."""


# What an unreachable, stopping or refusing server raises: a 503, and the service waits for
# it to come back. Anything else is a bug and answers 500.
UNAVAILABLE: Final = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,  # "connection is closed"
    asyncpg.exceptions.OperatorInterventionError,  # shutting down, starting up, canceled
    asyncpg.exceptions.InsufficientResourcesError,  # disk full, too many connections
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,  # wrong password
    asyncpg.exceptions.InvalidCatalogNameError,  # no such database
    asyncpg.exceptions.ReadOnlySQLTransactionError,  # a standby
    # A table renamed or dropped: an outage until it is back (a revoked right is a 500).
    asyncpg.exceptions.UndefinedTableError,
    asyncpg.exceptions.UndefinedColumnError,
    ConnectionLost,
)
# Taken while a process makes the tables or seeds them, so that replicas starting together
# don't race (CREATE TABLE IF NOT EXISTS alone is not safe under concurrency).
_SCHEMA_LOCK: Final = 0x7065_7473_746F_7265  # "petstore"

# One row a pet: `pet` is the Pet as the service serves it (a `json` column keeps a name's
# \u0000 as written; `text` and `jsonb` can't hold it), `status` beside it for the index that
# listPets by status walks. `petstore_ids` is one row: the next id to hand out and the number
# of pets. Its row lock is what orders the ids (see DatabaseStore).
_TABLES: Final = (
    """CREATE TABLE petstore_pets (
        id bigint PRIMARY KEY,
        status text,
        pet json NOT NULL,
        idempotency_key text UNIQUE,
        keyed_at timestamptz
    )""",
    "CREATE INDEX petstore_pets_by_status ON petstore_pets (status, id)",
    "CREATE TABLE petstore_ids (next_id bigint NOT NULL, pets bigint NOT NULL)",
    "INSERT INTO petstore_ids VALUES (1, 0)",
)
_SEED: Final = """
    INSERT INTO petstore_pets (id, status, pet)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::json[])"""
# A batch of creates in one statement, so one round trip, committed as it ends: reserve the
# block of ids (the row lock, held to the commit), insert each pet (its JSON as msgspec wrote
# it, the id put in front), skip a key another replica committed meanwhile. The counter, a
# bigint, may not pass the last id: a batch that would take it finds no block (`first` NULL,
# nothing stored), so ids end at 2**63 - 2 here (a seed may hold 2**63 - 1, INT64_MAX).
CREATE: Final = """
    WITH block AS (
        UPDATE petstore_ids SET next_id = next_id + $1, pets = pets + $1
        WHERE next_id <= 9223372036854775807 - $1
        RETURNING next_id - $1 AS first
    ), inserted AS (
        INSERT INTO petstore_pets (id, status, pet, idempotency_key, keyed_at)
        SELECT first + n - 1, status, ('{"id":' || first + n - 1 || after_id)::json, key, made_at
        FROM block, unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[])
            WITH ORDINALITY AS batch (status, after_id, key, made_at, n)
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING id
    )
    SELECT (SELECT first FROM block), array(SELECT id FROM inserted)"""
PET_START: Final = len(b'{"id":0')  # what Pet JSON holds before its other fields
GET: Final = "SELECT pet FROM petstore_pets WHERE id = $1"
PAGE: Final = "SELECT pet FROM petstore_pets WHERE id > $1 ORDER BY id LIMIT $2"
PAGE_BY_STATUS: Final = (
    "SELECT pet FROM petstore_pets WHERE status = $1 AND id > $2 ORDER BY id LIMIT $3"
)
KEYED: Final = "SELECT pet FROM petstore_pets WHERE idempotency_key = $1"
# The number of pets (for the metrics), read by the probe. `NOT EXISTS (... LIMIT 0)` is always
# true: it only names petstore_pets, so that the probe fails while that table is renamed away.
COUNT: Final = "SELECT pets FROM petstore_ids WHERE NOT EXISTS (SELECT FROM petstore_pets LIMIT 0)"
# Taking back from the count the creates that a key conflict skipped.
UNCOUNT: Final = "UPDATE petstore_ids SET pets = pets - $1"


class DatabaseError(Exception):
    """The database can't be used by this service; the text says why (never the password)."""


async def prepare(connection: Connection, where: str, seed: Sequence[SeedPet]) -> None:
    """Tables and schema version, the seed into a database that never had a pet; raises
    DatabaseError for a schema this version doesn't know. `where` names the database in logs."""
    made = False
    async with connection.transaction():
        await connection.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        # Made only when missing: CREATE, even IF NOT EXISTS, needs the right to create in the
        # schema, which a role that only uses the tables has no need of.
        if await connection.fetchval("SELECT to_regclass('petstore_schema') IS NULL"):
            await connection.execute("CREATE TABLE petstore_schema (version integer NOT NULL)")
        version = await connection.fetchval("SELECT max(version) FROM petstore_schema")
        if version is None:
            try:
                for statement in _TABLES:
                    await connection.execute(statement)
            except asyncpg.DuplicateTableError as error:  # another program's, of our names
                raise DatabaseError(
                    f"database {where}: it holds tables of petstore's names that no petstore"
                    f" made ({error}); give the service a database of its own"
                ) from None
            await connection.execute("INSERT INTO petstore_schema VALUES ($1)", SCHEMA_VERSION)
            made = True
        elif version > SCHEMA_VERSION:
            raise DatabaseError(
                f"database {where}: its schema version {version} is newer than this "
                f"service's ({SCHEMA_VERSION}); run a newer petstore"
            )
        elif version < 1:  # none that petstore made: its tables are not ours to wait for
            raise DatabaseError(
                f"database {where}: its schema version {version} is none petstore made (this"
                f" service's is {SCHEMA_VERSION}); give the service a database of its own"
            )
        next_id = await connection.fetchval("SELECT next_id FROM petstore_ids FOR UPDATE")
        seeded = seed_pets(seed, last_id=0) if seed and next_id == 1 else []
        if seeded:
            await _insert_seed(connection, seeded)
    # Said once committed: an attempt cut off (and rolled back) made nothing.
    if made:
        logger.info("made the tables in %s (schema version %d)", where, SCHEMA_VERSION)
    if seeded:
        logger.info("seeded %d pets into %s", len(seeded), where)


# A seed is one statement, given time by its size beyond the statements' STATEMENT_SECONDS:
# two million pets took 17 s here (cut off at 10 s, the start never seeded).
_SEED_SECONDS_A_PET: Final = 50e-6


async def _insert_seed(connection: Connection, pets: list[Pet]) -> None:
    await connection.execute(
        _SEED,
        [pet.id for pet in pets],
        [status_column(pet.status) for pet in pets],
        [encoder.encode(pet).decode() for pet in pets],
        timeout=STATEMENT_SECONDS + len(pets) * _SEED_SECONDS_A_PET,
    )
    # The counter is a bigint too: a seed that took the last id leaves it there, where no
    # block fits (CREATE), as none would past it.
    next_id = min(pets[-1].id + 1, INT64_MAX)
    await connection.execute("UPDATE petstore_ids SET next_id = $1, pets = $2", next_id, len(pets))


def status_column(status: Any) -> str | None:
    """What the `status` column holds: the status's value, NULL for a pet without one."""
    return status.value if isinstance(status, PetStatus) else None


# What closes a connection rather than give it back to the pool (given_up).
GIVE_UP_ON: Final = (TimeoutError, asyncio.CancelledError, asyncpg.exceptions.InternalClientError)
# How asyncpg's InternalClientError begins when the server ended the connection under it.
_STATE_LOST: Final = "cannot switch to state"


async def answered(
    pool: asyncpg.Pool, method: Literal["fetch", "fetchrow", "fetchval", "execute"], *args: Any
) -> Any:
    """`method(*args)` on a connection of the pool (whose statements time out after
    STATEMENT_SECONDS); one that fails on it as `given_up` says is closed. (A context manager
    of ours around the pool's cost every statement 3 us.)"""
    async with pool.acquire() as connection:
        try:
            return await getattr(connection, method)(*args)
        except GIVE_UP_ON as error:
            raise given_up(connection, error) from None


def given_up(connection: Connection, error: BaseException) -> BaseException:
    """Close `connection` at once after `error` (one of GIVE_UP_ON) on it, and say what to
    raise. A statement cut off by its timeout or by the caller's cancellation at shutdown: the
    driver would otherwise wait for its cancel request before taking the connection back, which
    a server that stopped answering (a network partition) never takes; a request waited twice
    the timeout for its 503, and one the shutdown cut off was never answered (the same with
    pool.fetchval and the like). The driver's state lost (InternalClientError): lent again, it
    failed again; the server ending it mid-operation is ConnectionLost, an outage."""
    connection.terminate()
    if isinstance(error, asyncpg.exceptions.InternalClientError) and str(error).startswith(
        _STATE_LOST
    ):
        return ConnectionLost(f"the connection was ended mid-operation ({error})")
    return error
