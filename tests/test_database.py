"""The database store: every promise of the Store section over a real PostgreSQL that the suite
starts, replicas sharing it (ids visible in order, keys replayed anywhere), outages and crashes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import Petstore, create_app, open_store
from pgstore import SCHEMA_LOCK, DatabaseError, DatabaseStore, describe
from schemas import NewPet
from settings import Settings, SettingsError, load_settings
from tests.conftest import (
    AUTH,
    KEY,
    Launcher,
    ServerFactory,
    assert_error,
    free_port,
    serving,
    wait_until,
)
from tests.postgres import Cluster
from tests.test_control_plane import ADMIN

pytestmark = pytest.mark.anyio

REX = {"name": "Rex", "categoryId": 1, "status": "available"}
TOM = {"name": "Tom", "categoryId": 2}


@pytest.fixture
def url(database_url: str) -> str:
    return database_url


def database_app(url: str, seed: str | None = None, **settings: Any) -> Petstore:
    configured = Settings(api_keys=(KEY,), database=url, seed=seed, **settings)
    return create_app(configured, open_store(configured))


@asynccontextmanager
async def replica(url: str, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process service over the database, started, with an authenticated client."""
    async with serving(database_app(url, **settings)) as http:
        yield http


async def beside(postgres: Cluster, statement: str, url: str) -> None:
    """Run a statement in the database of `url` with psql while an in-process service runs on
    this loop: in a thread, so that the service's transactions go on meanwhile (run on the
    loop, psql may wait for a lock that a transaction of the service's holds, which can't end
    while the loop waits for psql)."""
    await asyncio.to_thread(postgres.sql, statement, Cluster.name(url))


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


async def eventually(check: Callable[[], Awaitable[object]], what: str) -> None:
    """Until `check` comes true (looked at every 10 ms, for 10 s at most)."""
    for _ in range(1000):
        if await check():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"{what}: not within 10 s")


# --------------------------------------------------------------------------- the interface


async def test_creates_reads_and_pages_over_the_database(url: str) -> None:
    """Ids from 1; getPet, listPets with and without status, pages by `after` with their Link."""
    async with replica(url) as http:
        created = [(await http.post("/v1/pets", json=pet)).json() for pet in (REX, TOM, REX)]
        assert [pet["id"] for pet in created] == [1, 2, 3]
        assert (await http.get("/v1/pets/2")).json() == {"id": 2, **TOM}
        assert_error(await http.get("/v1/pets/4"), 404, "not_found")
        first = await http.get("/v1/pets", params={"limit": 2})
        assert (first.json(), first.headers["link"]) == (
            created[:2],
            '</v1/pets?limit=2&after=2>; rel="next"',
        )
        last = await http.get("/v1/pets", params={"limit": 2, "after": 2})
        assert (last.json(), "link" in last.headers) == (created[2:], False)
        by_status = await http.get("/v1/pets", params={"status": "available", "limit": 1})
        assert by_status.json() == [created[0]]
        assert by_status.headers["link"] == (
            '</v1/pets?limit=1&status=available&after=1>; rel="next"'
        )


async def test_any_name_json_can_carry_is_kept(url: str) -> None:
    """NUL (which PostgreSQL's text can't hold), quotes, emoji and escapes come back as sent."""
    names = ["nul\u0000inside", 'quote " and \\ backslash', "emoji \U0001f408", "\u2028"]
    async with replica(url) as http:
        for name in names:
            created = await http.post("/v1/pets", json={"name": name, "categoryId": -1})
            assert created.status_code == 201
            assert (await http.get(created.headers["location"])).json()["name"] == name


async def test_tables_are_made_once_with_a_schema_version(url: str, postgres: Cluster) -> None:
    """The first start makes the tables and records version 1; a second start keeps the pets."""
    async with replica(url) as http:
        await http.post("/v1/pets", json=REX)
    async with replica(url) as http:
        assert (await http.get("/v1/pets")).json() == [{"id": 1, **REX}]
    database = Cluster.name(url)
    assert postgres.sql("SELECT version FROM petstore_schema", database) == "1\n"
    assert postgres.sql("SELECT pet FROM petstore_pets", database) == (
        '{"id":1,"name":"Rex","categoryId":1,"status":"available"}\n'
    )


async def test_a_seed_fills_an_empty_database_only(url: str, tmp_path: Any) -> None:
    """--seed goes into a database that never had a pet, ids included; later starts ignore it."""
    seed = tmp_path / "seed.json"
    seed.write_text(
        '[{"id": 10, "name": "Rex", "categoryId": 1}, {"name": "Tom", "categoryId": 2}]'
    )
    async with replica(url, seed=str(seed)) as http:
        assert (await http.post("/v1/pets", json=REX)).json()["id"] == 12
    async with replica(url, seed=str(seed)) as http:
        assert [pet["id"] for pet in (await http.get("/v1/pets")).json()] == [10, 11, 12]


async def test_reset_is_refused_with_a_database(url: str) -> None:
    """Pets in a database are never deleted: 409 reset_unavailable, and the pets stay."""
    async with replica(url, admin_keys=("admin-key-0123456789",)) as http:
        await http.post("/v1/pets", json=REX)
        assert_error(await http.post("/_admin/reset", headers=ADMIN), 409, "reset_unavailable")
        assert len((await http.get("/v1/pets")).json()) == 1


async def test_metrics_count_the_pets_in_the_database(url: str) -> None:
    """petstore_pets is the database's count; petstore_store_writable is 1 while it answers."""
    async with replica(url) as http:
        for _ in range(3):
            await http.post("/v1/pets", json=TOM)
        families = {
            family.name: family.samples[0].value
            for family in text_string_to_metric_families((await http.get("/metrics")).text)
            if family.name in ("petstore_pets", "petstore_store_writable")
        }
    assert families == {"petstore_pets": 3, "petstore_store_writable": 1}


async def test_ids_end_below_the_counter_s_last_value(url: str, postgres: Cluster) -> None:
    """Ids go up to 2**63 - 2; a create past them is 503 storage_unavailable and stores nothing."""
    # The counter is a bigint: not a 500 from the database's "bigint out of range".
    async with replica(url) as http:
        await http.post("/v1/pets", json=REX)
        await beside(postgres, "UPDATE petstore_ids SET next_id = 9223372036854775805", url)
        made = [await http.post("/v1/pets", json=TOM) for _ in range(3)]
        assert [answer.status_code for answer in made[:2]] == [201, 201]
        assert [answer.json()["id"] for answer in made[:2]] == [2**63 - 3, 2**63 - 2]
        message = assert_error(made[2], 503, "storage_unavailable")
        assert message == f"Every id up to {2**63 - 1} is taken: no pet can be added"
        assert len((await http.get("/v1/pets")).json()) == 3
        assert (await http.get(f"/v1/pets/{2**63 - 2}")).status_code == 200


async def test_a_seed_that_takes_the_last_id_leaves_no_id_to_give(url: str, tmp_path: Any) -> None:
    """A seed may hold id 2**63 - 1: it is stored, and a create then answers 503."""
    # The counter can't pass it; setting it had failed with a traceback.
    seed = tmp_path / "seed.json"
    seed.write_text(f'[{{"id": {2**63 - 1}, "name": "Rex", "categoryId": 1}}]')
    async with replica(url, seed=str(seed)) as http:
        assert (await http.get(f"/v1/pets/{2**63 - 1}")).json()["name"] == "Rex"
        assert_error(await http.post("/v1/pets", json=TOM), 503, "storage_unavailable")


@pytest.mark.parametrize("table", ["petstore_ids", "petstore_pets"])
async def test_a_table_renamed_away_is_an_outage_the_service_recovers_from(
    url: str, postgres: Cluster, table: str
) -> None:
    """A table renamed away: readyz, creates and reads are 503 naming it; ready again once back."""
    # The check had ended at the first such error, leaving readiness as it last was; and with
    # petstore_pets away, readyz said ready while every request was a 500.
    async with replica(url) as http:
        assert (await http.post("/v1/pets", json=REX)).status_code == 201
        await beside(postgres, f"ALTER TABLE {table} RENAME TO {table}_away", url)

        async def ready(status: int) -> bool:
            return (await http.get("/readyz")).status_code == status

        await eventually(lambda: ready(503), "readyz 503")
        message = assert_error(await http.get("/readyz"), 503, "storage_unavailable")
        assert "UndefinedTableError" in message
        assert_error(await http.post("/v1/pets", json=REX), 503, "storage_unavailable")
        assert_error(await http.get("/v1/pets/1"), 503, "storage_unavailable")
        assert_error(await http.get("/v1/pets"), 503, "storage_unavailable")
        await beside(postgres, f"ALTER TABLE {table}_away RENAME TO {table}", url)
        await eventually(lambda: ready(200), "readyz 200 again")
        assert (await http.post("/v1/pets", json=REX)).status_code == 201
        assert (await http.get("/v1/pets/1")).status_code == 200


async def test_connections_the_server_ends_under_load_are_503s_never_500s(
    url: str, postgres: Cluster
) -> None:
    """Backends ended under creates and reads (pg_terminate_backend): 503s, never a 500; every
    201 stored."""
    # A connection the server ended mid-operation can make its next statement raise asyncpg's
    # InternalClientError ("cannot switch to state 15"), or the pool's reset query fail after a
    # create committed: both were 500s.
    statuses: list[int] = []
    created: list[dict[str, Any]] = []
    terminate = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    async with replica(url) as http:

        async def creates() -> None:
            for _ in range(30):
                answer = await http.post("/v1/pets", json=REX)
                statuses.append(answer.status_code)
                if answer.status_code == 201:
                    created.append(answer.json())
                elif answer.status_code == 503:
                    assert_error(answer, 503, "storage_unavailable")

        async def reads() -> None:
            for _ in range(30):
                statuses.append((await http.get("/v1/pets/1")).status_code)

        async def answered(count: int) -> bool:
            return len(statuses) >= count

        for _ in range(15):
            before = len(statuses)
            load = [asyncio.create_task(work()) for work in (creates,) * 4 + (reads,) * 2]
            # Ended under way: the backends are mid-operation.
            await eventually(lambda: answered(before + 6), "the load under way")  # noqa: B023
            await beside(postgres, terminate, url)
            await asyncio.gather(*load)
        await eventually(
            lambda: _says_ready(http), "ready again once the backends ended are replaced"
        )
    # Read beside the service: a pooled connection whose backend was ended may still answer one
    # request a 503 (asyncpg sees it ended only as it is used).
    rows = await asyncio.to_thread(postgres.sql, "SELECT pet FROM petstore_pets", Cluster.name(url))
    stored = [json.loads(row) for row in rows.splitlines()]
    assert [pet for pet in created if pet not in stored] == []
    assert set(statuses) <= {200, 201, 404, 503}, sorted(set(statuses))


async def _says_ready(http: httpx.AsyncClient) -> bool:
    return (await http.get("/readyz")).status_code == 200


async def test_a_role_that_may_only_use_the_tables_runs_the_service(
    url: str, postgres: Cluster
) -> None:
    """A role with every right on the tables but none to create in the schema runs the service."""
    # No right to create in the schema is PostgreSQL 15's default for all but its owner. The start's
    # CREATE TABLE IF NOT EXISTS was refused even with the tables there, and stopped every start
    # with a traceback.
    async with replica(url) as http:
        assert (await http.post("/v1/pets", json=REX)).status_code == 201
    role, password = f"user_{next(ROLES)}", "a-password-0123456789"
    postgres.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
    grant = f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
    postgres.sql(grant, Cluster.name(url))
    limited = url.replace(f"//petstore:{postgres.password}@", f"//{role}:{password}@")
    async with replica(limited) as http:
        assert (await http.get("/readyz")).status_code == 200
        assert (await http.post("/v1/pets", json=TOM)).status_code == 201
        assert [pet["name"] for pet in (await http.get("/v1/pets")).json()] == ["Rex", "Tom"]


ROLES = itertools.count(1)


def test_a_setting_the_server_refuses_stops_the_start_in_one_line(
    url: str, postgres: Cluster, start_server: ServerFactory
) -> None:
    """A parameter the server refuses stops the start in one line, like one the driver refuses."""
    # The parameter: an unknown setting in the URL's query. It is a bad setting; it was a 43-line
    # traceback and exit 1.
    server = start_server("--database", f"{url}&bogus_setting=1", wait=False)
    assert server.process.wait(15) == 2
    assert server.stderr.strip().splitlines()[-1] == (
        f"petstore: database {postgres.directory}/{Cluster.name(url)}: UndefinedObjectError: "
        'unrecognized configuration parameter "bogus_setting"'
    )
    assert "Traceback" not in server.stderr
    secret_free(postgres, server.stdout, server.stderr)


# --------------------------------------------------------------------------- idempotency keys


async def test_a_retry_sent_to_another_replica_is_replayed_there(url: str) -> None:
    """A retry on replica B replays A's 201 and refuses the key with another request (422)."""
    # The key is in the database: B replays the body and the Location; one pet in all.
    async with replica(url) as a, replica(url) as b:
        first = await a.post("/v1/pets", json=REX, headers=keyed("order-7"))
        again = await b.post("/v1/pets", json=REX, headers=keyed('"order-7"'))
        other = await b.post("/v1/pets", json=TOM, headers=keyed("order-7"))
        pets = (await b.get("/v1/pets")).json()
    assert first.status_code == 201
    assert (again.status_code, again.content, again.headers["location"]) == (
        201,
        first.content,
        first.headers["location"],
    )
    assert again.headers["idempotent-replayed"] == "true"
    assert_error(other, 422, "idempotency_key_reused")
    assert pets == [first.json()]


async def test_concurrent_creates_with_one_key_on_two_replicas_make_one_pet(url: str) -> None:
    """Concurrent creates with one key on two replicas make one pet; each gets its 201 or a 409."""
    # 16 creates with one key and body, 8 on each replica, at once: one pet; every answer is that
    # pet's 201 (first or replayed) or a 409, never a second pet or a 500.
    async with replica(url) as a, replica(url) as b:
        answers = await asyncio.gather(
            *(http.post("/v1/pets", json=REX, headers=keyed("once")) for http in [a, b] * 8)
        )
        pets = (await a.get("/v1/pets")).json()
    assert len(pets) == 1
    for answer in answers:
        assert answer.status_code in (201, 409), answer.text
        if answer.status_code == 201:
            assert answer.json() == pets[0]
    assert sum("idempotent-replayed" not in answer.headers for answer in answers) >= 1


# --------------------------------------------------------------------------- settings


def test_data_and_database_together_are_refused_in_one_line() -> None:
    """A data file and a database together stop the start in one line."""
    with pytest.raises(SettingsError) as refused:
        load_settings(["--data", "pets.jsonl", "--database", "postgresql://u:secret@h/db"], {})
    assert str(refused.value) == (
        "--data and --database: pets live in a file or a database, not both"
    )


@pytest.mark.parametrize(
    "bad",
    [
        "mysql://u:secret@h/db",
        "secret",
        "postgresql://",
        "postgresql://u:secret@h:port/db",
        "postgresql://u:secret@h1:5432,h2:99999/db",
        "postgresql://u:secret@h:¹²/db",  # digits, but not ASCII ones: int() refused them
    ],
)
def test_a_bad_database_url_is_refused_without_showing_it(bad: str) -> None:
    """A database URL that is not one is refused, and not shown (it may hold a password)."""
    with pytest.raises(SettingsError) as refused:
        load_settings([], {"PETSTORE_DATABASE_URL": bad})
    assert str(refused.value).startswith("PETSTORE_DATABASE_URL: ")
    assert "secret" not in str(refused.value)
    assert "secret" not in repr(load_settings(["--database", "postgresql://u:secret@h/d"], {}))


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:sec@ret@h:5432/db",
        "postgresql://u:sec@ret:1234@h/db",
        "postgresql://u:1#ret@h/db",
        "postgresql://u:/secret@h/db",  # read as the host `u` and an empty port
        "postgresql://u:2024/secret@h/db",  # as the host `u`, port 2024
        "postgresql://u:sec?ret@h/db",
    ],
)
def test_a_password_that_could_be_read_two_ways_is_refused(url: str) -> None:
    """A database URL whose password could be read two ways is refused, saying how to write it."""
    # The driver reads a user's part up to its first @, urllib (which finds the password to redact)
    # up to its last, and a # ends it for both: the rest would have been logged as the host
    # ("database 1234@h/db unavailable").
    with pytest.raises(SettingsError) as refused:
        load_settings([], {"PETSTORE_DATABASE_URL": url})
    assert str(refused.value) == (
        "PETSTORE_DATABASE_URL: write an @, #, / or ? in the password as %40, %23, %2F or %3F"
    )


@pytest.mark.parametrize(
    ("url", "described"),
    [
        ("postgresql://u:secret@db/pets", "db/pets"),
        ("postgresql://u:secret@db:5433/pets", "db:5433/pets"),
        ("postgresql://u:secret@one:5432,two:5433/pets", "one:5432,two:5433/pets"),
        ("postgresql://u:secret@[::1]:5432/pets", "[::1]:5432/pets"),
        ("postgresql://u:p%40ss@db/pets", "db/pets"),
        ("postgresql:///pets?host=/run/postgresql", "/run/postgresql/pets"),
        ("postgresql://u@/pets", "localhost/pets"),
    ],
)
def test_a_good_url_is_taken_and_logs_name_its_hosts_only(url: str, described: str) -> None:
    """A good database URL is taken, and named in logs as HOST:PORT/DATABASE only."""
    # Good: one host or several (libpq's primary and standbys), a port or none, IPv6, a unix socket.
    # Logs never show the user's part.
    assert load_settings([], {"PETSTORE_DATABASE_URL": url}).database == url
    assert describe(url) == described


# --------------------------------------------------------------------------- real processes


def secret_free(postgres: Cluster, *outputs: str) -> None:
    for output in outputs:
        assert postgres.password not in output


@pytest.mark.parametrize("version", [2, 0])
def test_a_schema_of_another_version_stops_the_start_in_one_line(
    url: str, postgres: Cluster, start_server: ServerFactory, version: int
) -> None:
    """A newer version, or one no petstore made: its tables are not ours to wait for."""
    database = Cluster.name(url)
    postgres.sql("CREATE TABLE petstore_schema (version integer NOT NULL)", database)
    postgres.sql(f"INSERT INTO petstore_schema VALUES ({version:d})", database)  # noqa: S608 - an int
    server = start_server("--database", url, wait=False)
    assert server.process.wait(15) == 2
    assert server.stderr.strip().splitlines()[-1] == (
        f"petstore: database {postgres.directory}/{database}: its schema version is {version},"
        " this service's 1; run the petstore that made it"
    )
    assert "Traceback" not in server.stderr
    secret_free(postgres, server.stdout, server.stderr)


async def test_a_database_with_another_program_s_table_of_our_name_stops_the_start(
    url: str, postgres: Cluster
) -> None:
    """A database holding a `petstore_pets` no petstore made stops the start, and keeps nothing of
    ours."""
    database = Cluster.name(url)
    postgres.sql("CREATE TABLE petstore_pets (owner text)", database)
    store = DatabaseStore(url, password=postgres.password)
    with pytest.raises(DatabaseError) as raised:
        await store.open()
    await store.close()
    assert str(raised.value) == (
        f"database {postgres.directory}/{database}: DuplicateTableError: relation"
        ' "petstore_pets" already exists'
    )
    tables = postgres.sql(
        "SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = 'public'", database
    )
    assert tables.strip() == "petstore_pets"


@contextmanager
def creating(base_urls: list[str], clients: int, creates: int = 10**6) -> Iterator[list[int]]:
    """`clients` threads sending up to `creates` creates each, round the replicas (each client
    starting at another), until the block ends; yields the ids that got a 201, as they come.
    Anything but a 201, a 503 or a dropped connection fails the test."""
    acknowledged: list[int] = []
    stop = threading.Event()

    def client(first: int) -> None:
        order = itertools.cycle(base_urls[first:] + base_urls[:first])
        with httpx.Client(headers=AUTH, timeout=10) as http:
            for number, base_url in zip(range(creates), order, strict=False):
                if stop.is_set():
                    return
                try:
                    answer = http.post(
                        f"{base_url}/v1/pets", json={"name": f"n{number}", "categoryId": 1}
                    )
                except httpx.TransportError:
                    continue  # the replica was killed: no answer, so no promise
                assert answer.status_code in (201, 503), answer.text
                if answer.status_code == 201:
                    acknowledged.append(answer.json()["id"])

    threads = [threading.Thread(target=client, args=(n % len(base_urls),)) for n in range(clients)]
    for thread in threads:
        thread.start()
    try:
        yield acknowledged
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def every_id(http: httpx.Client) -> list[int]:
    """The ids of every stored pet, walking the pages by `after`."""
    ids: list[int] = []
    while page := http.get(
        "/v1/pets", params={"after": ids[-1] if ids else 0, "limit": 100}
    ).json():
        ids += [pet["id"] for pet in page]
    return ids


def test_a_reader_following_after_across_replicas_misses_nothing(
    url: str, start_server: ServerFactory
) -> None:
    """A reader tailing by `after` across replicas sees every acknowledged pet once, in order."""
    # Two replicas under 8 concurrent clients, 60 creates each; the reader asks the replicas in
    # turn.
    base_urls = [start_server("--database", url).base_url for _ in range(2)]
    seen: list[int] = []
    with httpx.Client(headers=AUTH, timeout=10) as reader:

        def tail(base_url: str) -> int:
            page = reader.get(
                f"{base_url}/v1/pets", params={"after": seen[-1] if seen else 0, "limit": 100}
            )
            assert page.status_code == 200
            seen.extend(pet["id"] for pet in page.json())
            return len(page.json())

        with creating(base_urls, clients=8, creates=60) as acknowledged:
            deadline = time.monotonic() + 60
            for base_url in itertools.cycle(base_urls):
                tail(base_url)
                if len(acknowledged) == 480 or time.monotonic() > deadline:
                    break
        while tail(base_urls[0]) or tail(base_urls[1]):
            pass  # read to the end, now that every create has its answer
    assert len(acknowledged) == 480
    assert seen == sorted(set(seen))
    assert set(seen) == set(acknowledged)


def test_sigkill_of_a_replica_loses_no_acknowledged_pet(
    url: str, start_server: ServerFactory
) -> None:
    """A replica killed mid-load: every pet it answered 201 for is in the database."""
    doomed, survivor = (start_server("--database", url) for _ in range(2))
    with creating([doomed.base_url], clients=8) as acknowledged:
        wait_until(lambda: len(acknowledged) >= 200, "200 creates acknowledged")
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait()
    with survivor.client() as http:
        stored = every_id(http)
        assert http.post("/v1/pets", json=REX).status_code == 201
    assert set(acknowledged) <= set(stored)
    assert len(stored) == len(set(stored))


def test_an_outage_answers_503_then_recovers_by_itself(
    own_postgres: Cluster, start_server: ServerFactory
) -> None:
    """A database crash answers 503 storage_unavailable meanwhile, then recovers by itself."""
    # The server crashes (pg_ctl stop -m immediate) under load and comes back: 503
    # storage_unavailable meanwhile, readyz 503, healthz 200, one log line when it went and one when
    # it came back; nothing acknowledged lost, and creates work again.
    server = start_server("--database", own_postgres.url("postgres"), "--log-format", "json")
    with server.client() as http, creating([server.base_url], clients=4) as acknowledged:
        wait_until(lambda: len(acknowledged) >= 100, "100 creates acknowledged")
        own_postgres.stop("immediate")
        wait_until(lambda: http.get("/readyz").status_code == 503, "readyz 503")
        why = assert_error(http.get("/readyz"), 503, "storage_unavailable")
        assert why.startswith("The database is unavailable: "), why  # the cause, named
        assert "\npetstore_store_writable 0.0\n" in http.get("/metrics").text
        assert_error(http.post("/v1/pets", json=REX), 503, "storage_unavailable")
        assert_error(http.get("/v1/pets/1"), 503, "storage_unavailable")
        assert_error(http.get("/v1/pets"), 503, "storage_unavailable")
        assert http.get("/healthz").status_code == 200
        own_postgres.start()
        wait_until(lambda: http.get("/readyz").status_code == 200, "readyz 200 again")
        assert "\npetstore_store_writable 1.0\n" in http.get("/metrics").text
    with server.client() as http:
        assert http.post("/v1/pets", json=REX).status_code == 201
        assert set(acknowledged) <= set(every_id(http))
    assert server.stop() in (0, -15)
    lines = [json.loads(line) for line in server.stderr.splitlines()]
    outage = [line for line in lines if "database /" in line["message"]]
    assert [
        (line["level"], re.sub(r" \(.*| [0-9.]+ s$", "", line["message"])) for line in outage
    ] == [
        ("WARNING", f"database {own_postgres.directory}/postgres unavailable"),
        ("INFO", f"database {own_postgres.directory}/postgres available again after"),
    ], outage
    secret_free(own_postgres, server.stdout, server.stderr)


def test_the_start_waits_for_the_database(start_server: ServerFactory) -> None:
    """Started before its database, the service waits, then is ready by itself once it is up."""
    # While it waits: the ready line, readyz 503 and healthz 200 (one log line); once the database
    # is up, tables made.
    cluster = Cluster()  # made, not started
    try:
        server = start_server("--database", cluster.url("postgres"), wait=False)
        with server.client() as http:
            wait_until(lambda: "petstore: ready at" in server.stdout, "the ready line")
            why = assert_error(http.get("/readyz"), 503, "storage_unavailable")
            assert why.startswith("The database is unavailable: "), why
            assert http.get("/healthz").status_code == 200
            cluster.start()
            server.wait_ready()
            assert http.post("/v1/pets", json=REX).json() == {"id": 1, **REX}
        assert server.stderr.count("waiting for it") == 1, server.stderr
        secret_free(cluster, server.stdout, server.stderr)
    finally:
        cluster.destroy()


def test_a_wrong_password_is_an_outage_that_never_shows_it(
    postgres: Cluster, start_server: ServerFactory
) -> None:
    """A wrong database password is an outage, and no line shows it."""
    wrong = postgres.url("postgres").replace(postgres.password, "not-the-password-4711")
    server = start_server("--database", wrong, wait=False)
    with server.client() as http:
        wait_until(lambda: "petstore: ready at" in server.stdout, "the ready line")
        assert "password authentication failed" in server.stderr
        assert_error(http.get("/v1/pets"), 503, "storage_unavailable")
    assert "not-the-password-4711" not in server.stdout + server.stderr


def test_uvicorn_workers_share_the_database(url: str, launch: Launcher) -> None:
    """`uvicorn app:app --workers 2` is allowed with a database: both serve the same pets."""
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "app:app", "--workers", "2", "--port", str(port)]
    server = launch(argv, {"PETSTORE_DATABASE_URL": url, "PETSTORE_API_KEYS": KEY}, port)
    server.headers = dict(AUTH)
    server.wait_ready(30)
    with server.client() as http:
        ids = [http.post("/v1/pets", json=TOM).json()["id"] for _ in range(20)]
        assert [pet["id"] for pet in http.get("/v1/pets").json()] == ids == sorted(set(ids))


def test_a_url_the_driver_refuses_stops_the_start_in_one_line(start_server: ServerFactory) -> None:
    """A parameter the driver can't use is a bad setting, not an outage to wait out."""
    server = start_server(
        "--database", "postgresql://u:sekrit-password-0123@localhost:1/db?sslmode=bogus", wait=False
    )
    assert server.process.wait(15) == 2
    assert server.stderr.strip().splitlines()[-1] == (
        "petstore: database localhost:1/db: ClientConfigurationError: `sslmode` parameter must be "
        "one of: disable, allow, prefer, require, verify-ca, verify-full"
    )
    assert "Traceback" not in server.stderr
    assert "sekrit" not in server.stdout + server.stderr


def test_json_logs_take_a_library_s_warnings_too(
    url: str, postgres: Cluster, start_server: ServerFactory, tmp_path: Path
) -> None:
    """With `--log-format json` every line is one JSON object, a library's warnings too."""
    # asyncpg's `warnings.warn` of a password file others may read (it is then not read) went out as
    # two lines of text, past the logs' redaction.
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:*:{postgres.password}\n")
    passfile.chmod(0o644)
    without_password = url.replace(f":{postgres.password}@", "@")
    server = start_server(
        "--database",
        without_password,
        "--log-format",
        "json",
        env={"PGPASSFILE": str(passfile)},
        wait=False,  # never ready: the password file is not read
    )
    wait_until(lambda: "petstore: ready at" in server.stdout, "the start", timeout=15)
    assert server.stop() in (0, -15)
    records = [json.loads(line) for line in server.stderr.splitlines()]
    warnings = [record for record in records if record["logger"] == "py.warnings"]
    assert len(warnings) == 1, records
    assert "has group or world access" in warnings[0]["message"]
    assert warnings[0]["level"] == "WARNING"


def test_a_database_that_stops_answering_gets_503s_in_time(
    own_postgres: Cluster, start_server: ServerFactory
) -> None:
    """A hung database: a create, one queued behind it and a read are 503 within 15 s."""
    # The server hangs (a network partition: connections open, nothing answers). Each gets its 503
    # once the statement's 10 s run out: the driver's own timeout then waited for its cancel
    # request, which the hung server never takes, and answered after 20 s.
    server = start_server("--database", own_postgres.url("postgres"), "--log-level", "trace")
    in_app = "Started scope="  # uvicorn's trace of the app called
    with server.client() as http:
        http.timeout = httpx.Timeout(60)
        assert http.post("/v1/pets", json=REX).status_code == 201
        with own_postgres.hung(), concurrent.futures.ThreadPoolExecutor(3) as threads:
            began, before = time.monotonic(), server.stderr.count(in_app)
            sent = threads.submit(http.post, "/v1/pets", json=TOM)
            wait_until(lambda: server.stderr.count(in_app) > before, "the create in the app")
            queued = threads.submit(http.post, "/v1/pets", json=TOM)
            read = threads.submit(http.get, "/v1/pets/1")
            messages = [
                assert_error(answer.result(), 503, "storage_unavailable")
                for answer in (sent, queued, read)
            ]
            assert time.monotonic() - began < 15
    assert set(messages) == {"The database is unavailable: no answer in time"}


def test_sigterm_while_a_create_waits_on_a_hung_database_still_exits(
    own_postgres: Cluster, start_server: ServerFactory
) -> None:
    """SIGTERM while a create waits on a hung database: the service still exits, and the create
    is answered a 500."""
    server = start_server("--database", own_postgres.url("postgres"), "--log-level", "trace")
    in_app = "Started scope="
    with server.client() as http:
        http.timeout = httpx.Timeout(60)
        assert http.post("/v1/pets", json=REX).status_code == 201
        with own_postgres.hung(), concurrent.futures.ThreadPoolExecutor(1) as threads:
            before = server.stderr.count(in_app)
            waiting = threads.submit(http.post, "/v1/pets", json=TOM)
            wait_until(lambda: server.stderr.count(in_app) > before, "the create in the app")
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(30) in (0, -15)
            assert_error(waiting.result(), 500, "internal_error")


async def test_a_start_whose_statements_go_unanswered_gives_up_and_serves(
    url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A start whose statements go unanswered gives up after a statement's timeout, and the store
    is ready by itself once the database answers."""
    # The start's connection made and its statements left unanswered (here by the schema's lock,
    # held by another session; a partition after the handshake, a stuck migration): readyz 503 until
    # the database answers. It waited for good, before listening, a SIGTERM only noted.
    monkeypatch.setattr("pgstore.STATEMENT_SECONDS", 0.5)
    store = DatabaseStore(url)
    locker = await asyncpg.connect(url)
    try:
        async with locker.transaction():
            await locker.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
            await asyncio.wait_for(store.open(), 10)
            assert store.unwritable == "The database is unavailable: no answer in time"
        await eventually(lambda: _ready(store), "the store ready once the lock is let go")
    finally:
        await asyncio.gather(locker.close(), store.close())
    assert "unavailable (no answer in time); waiting for it" in caplog.text


async def test_a_seed_longer_than_a_statement_s_timeout_is_given_time_by_its_size(
    url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The seed's one statement is given the statements' timeout and more by its size."""
    # With the timeout cut to 0.2 s here, 100,000 pets (about a second) are seeded at the start, as
    # two million (17 s) are under the 10 s one. It was cut off, and retried for ever.
    monkeypatch.setattr("pgstore.STATEMENT_SECONDS", 0.2)
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps([{"name": f"pet {n}", "categoryId": 1} for n in range(100_000)]))
    store = open_store(Settings(api_keys=(KEY,), database=url, seed=str(seed)))
    await store.open()
    try:
        assert (store.unwritable, store.count) == (None, 100_000)
    finally:
        await store.close()


async def test_closing_does_not_wait_for_the_watcher_s_statement(url: str) -> None:
    """With the watcher's look at the database held up, the store closes at once."""
    # Held up here by a lock on the table it reads; a database that stopped answering holds it up to
    # the statement's 10 s. So SIGTERM ends an idle replica over a hung database at once.
    store = DatabaseStore(url)
    await store.open()
    locker, watcher = await asyncpg.connect(url), await asyncpg.connect(url)
    try:
        await eventually(lambda: _ready(store), "the store ready")
        async with locker.transaction():
            await locker.execute("LOCK TABLE petstore_ids IN ACCESS EXCLUSIVE MODE")
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            await eventually(lambda: watcher.fetchval(waiting), "the watcher's look waiting")
            began = time.monotonic()
            await asyncio.wait_for(store.close(), 10)
            took = time.monotonic() - began
    finally:
        await asyncio.gather(locker.close(), watcher.close())
    assert took < 2, f"{took:.1f} s"


async def test_closing_over_a_database_that_stopped_answering_takes_a_second(
    own_postgres: Cluster,
) -> None:
    """Over a hung database, the store lets go of the pool's connections after a second."""
    # The database hung, not yet known to be away (no statement has run out its time): the pool's
    # connections can't say goodbye.
    store = DatabaseStore(own_postgres.url("postgres"))
    await store.open()
    await eventually(lambda: _ready(store), "the store ready")
    await store.add(NewPet(name="Rex", categoryId=1))  # a connection in the pool
    with own_postgres.hung():
        began = time.monotonic()
        await asyncio.wait_for(store.close(), 10)
        took = time.monotonic() - began
    assert took < 2.5, f"{took:.1f} s"


async def _ready(store: DatabaseStore) -> bool:
    return store.unwritable is None


def test_an_outage_s_cause_never_shows_the_password_pgpassword_s_included(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An error holding the driver's password names it [redacted], in the 503s and in the log."""
    # The password is the URL's, or PGPASSWORD's when the URL has none, which the store once left as
    # it was.
    url = "postgresql://u@db/pets"
    settings = load_settings(
        ["--database", url], {"PGPASSWORD": "a-pgpassword-0123456789", "PETSTORE_API_KEYS": KEY}
    )
    store = DatabaseStore(url, password=settings.database_password)
    with caplog.at_level(logging.WARNING, logger="petstore"):
        store._went_down(RuntimeError("server said a-pgpassword-0123456789!"))
    assert store.unwritable == "The database is unavailable: RuntimeError: server said [redacted]!"
    assert "a-pgpassword" not in caplog.text


def test_the_503s_name_the_outage_s_latest_cause_and_the_log_its_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage's 503s name its latest cause, and the log its first."""
    # A server shutting down, then refusing connections: every 503 of the outage named the first
    # cause ("the database system is shutting down") long after it stopped being true.
    store = DatabaseStore("postgresql://u:a-password-0123456789@db/pets")
    with caplog.at_level(logging.WARNING, logger="petstore"):
        store._went_down(asyncpg.exceptions.CannotConnectNowError("shutting down"))
        store._went_down(ConnectionRefusedError(111, "Connection refused"))
    assert store.unwritable == "The database is unavailable: cannot connect: Connection refused"
    assert [record.getMessage() for record in caplog.records] == [
        "database db/pets unavailable (CannotConnectNowError: shutting down); creates and reads"
        " answer 503 until it is back"
    ]
