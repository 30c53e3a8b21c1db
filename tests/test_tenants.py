"""Tenants: minted by the plane, each with its own pets, ids, keys, journal and fault rules."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import Petstore, create_app
from filestore import FileStore
from schemas import SeedPet
from settings import Settings
from store import MemoryStore, seed_pets
from tests.conftest import AUTH, KEY, ServerFactory, assert_error, wait_until
from tests.test_control_plane import ADMIN, ADMIN_KEY, PLANE, REX, RFC3339_UTC, running

pytestmark = pytest.mark.anyio

TOM = {"name": "Tom", "categoryId": 2, "status": "sold"}


async def mint(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    """A new tenant's id, key and pets."""
    response = await client.post("/_admin/tenants", json=body, headers=ADMIN)
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    assert response.headers["location"] == f"/_admin/tenants/{made['id']}"
    return made


def bearer(tenant: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenant['apiKey']}"}


@pytest.fixture
async def plane() -> AsyncIterator[httpx.AsyncClient]:
    async with running(create_app(PLANE, MemoryStore())) as client:
        yield client


async def test_a_tenant_starts_empty_with_a_new_long_key(plane: httpx.AsyncClient) -> None:
    """Minted with `{}` and no service seed: no pets, a key of at least 32 characters."""
    tenant = await mint(plane)
    assert tenant["pets"] == 0
    assert len(tenant["apiKey"]) >= 32
    assert tenant["apiKey"] not in (KEY, ADMIN_KEY)
    assert (await plane.get("/v1/pets", headers=bearer(tenant))).json() == []
    created = await plane.post("/v1/pets", json=REX, headers=bearer(tenant))
    assert created.json() == {"id": 1, **REX}


async def test_a_tenant_starts_from_its_own_seed_or_the_service_s() -> None:
    """With `pets`, its own seed (ids kept, the next create after them); without, the service's."""
    app = create_app(PLANE, MemoryStore(seed_pets([SeedPet(name="Seed", categoryId=9)])))
    async with running(app) as plane:
        own = await mint(plane, pets=[{"id": 7, **REX}, TOM])
        assert own["pets"] == 2
        listed = (await plane.get("/v1/pets", headers=bearer(own))).json()
        assert listed == [{"id": 7, **REX}, {"id": 8, **TOM}]
        assert (await plane.post("/v1/pets", json=REX, headers=bearer(own))).json()["id"] == 9
        inherited = await mint(plane)
        assert inherited["pets"] == 1
        listed = (await plane.get("/v1/pets", headers=bearer(inherited))).json()
        assert listed == [{"id": 1, "name": "Seed", "categoryId": 9}]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", "malformed_json"),
        (
            b'{"pets": [{"id": 2, "name": "A", "categoryId": 1}, {"id": 1, "name": "B", '
            b'"categoryId": 1}]}',
            "validation_error",
        ),
        (b'{"pets": [{"name": ""}]}', "validation_error"),
        (b'{"seed": []}', "validation_error"),
    ],
)
async def test_a_bad_tenant_body_is_a_400_and_makes_none(
    plane: httpx.AsyncClient, body: bytes, code: str
) -> None:
    headers = {**ADMIN, "Content-Type": "application/json"}
    answer = await plane.post("/_admin/tenants", content=body, headers=headers)
    assert_error(answer, 400, code)
    assert (await plane.get("/_admin/tenants", headers=ADMIN)).json() == {"tenants": []}


async def test_tenants_and_the_configured_keys_never_see_each_other(
    plane: httpx.AsyncClient,
) -> None:
    """Pets, ids, idempotency keys, journal, fault rules and reset: each tenant's own, both ways."""
    one, two = await mint(plane), await mint(plane)
    keyed = {"Idempotency-Key": "same-key"}
    for who in (AUTH, bearer(one), bearer(two)):
        answer = await plane.post("/v1/pets", json=REX, headers={**who, **keyed})
        assert (answer.status_code, answer.json()["id"]) == (201, 1)  # the key is new to each
        assert "idempotent-replayed" not in answer.headers
    assert (await plane.post("/v1/pets", json=TOM, headers=bearer(one))).json()["id"] == 2
    assert [p["name"] for p in (await plane.get("/v1/pets", headers=bearer(one))).json()] == [
        "Rex",
        "Tom",
    ]
    assert len((await plane.get("/v1/pets", headers=bearer(two))).json()) == 1
    assert len((await plane.get("/v1/pets", headers=AUTH)).json()) == 1
    assert (await plane.get("/v1/pets/2", headers=bearer(two))).status_code == 404

    # A fault rule of one tenant touches only its requests.
    rule = {"operation": "*", "status": 503}
    added = await plane.post(f"/_admin/tenants/{one['id']}/faults", json=rule, headers=ADMIN)
    assert added.status_code == 201
    assert (await plane.get("/v1/pets", headers=bearer(one))).status_code == 503
    assert (await plane.get("/v1/pets", headers=bearer(two))).status_code == 200
    assert (await plane.get("/v1/pets", headers=AUTH)).status_code == 200
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == []
    path = f"/_admin/tenants/{one['id']}/faults"
    assert [r["id"] for r in (await plane.get(path, headers=ADMIN)).json()] == [added.json()["id"]]

    # Each journal holds its own requests; the configured keys' one, theirs.
    journals = {
        name: (await plane.get(path, headers=ADMIN)).json()["requests"]
        for name, path in (
            ("one", f"/_admin/tenants/{one['id']}/requests"),
            ("two", f"/_admin/tenants/{two['id']}/requests"),
            ("configured", "/_admin/requests"),
        )
    }
    assert [e["status"] for e in journals["one"]] == [201, 201, 200, 503]
    assert [e["status"] for e in journals["two"]] == [201, 200, 404, 200]
    assert [e["status"] for e in journals["configured"]] == [201, 200, 200]

    # A tenant's reset empties its pets, journal and rules only.
    reset = await plane.post(f"/_admin/tenants/{one['id']}/reset", headers=ADMIN)
    assert reset.json() == {"pets": 0}
    assert (await plane.get("/v1/pets", headers=bearer(one))).json() == []
    assert (await plane.get(f"/_admin/tenants/{one['id']}/faults", headers=ADMIN)).json() == []
    journal = await plane.get(f"/_admin/tenants/{one['id']}/requests", headers=ADMIN)
    assert [e["status"] for e in journal.json()["requests"]] == [200]  # the GET since the reset
    assert len((await plane.get("/v1/pets", headers=bearer(two))).json()) == 1
    assert len((await plane.get("/v1/pets", headers=AUTH)).json()) == 1
    # And the plane's own reset, the configured keys' only.
    assert (await plane.post("/_admin/reset", headers=ADMIN)).json() == {"pets": 0}
    assert len((await plane.get("/v1/pets", headers=bearer(two))).json()) == 1


async def test_a_deleted_tenant_s_key_is_refused_at_once(plane: httpx.AsyncClient) -> None:
    """DELETE: 204; then its key is a 401 journaled with the configured keys', its paths 404."""
    tenant = await mint(plane)
    assert (await plane.post("/v1/pets", json=REX, headers=bearer(tenant))).status_code == 201
    assert (await plane.delete(f"/_admin/tenants/{tenant['id']}", headers=ADMIN)).status_code == 204
    assert_error(await plane.get("/v1/pets", headers=bearer(tenant)), 401, "unauthorized")
    for method, path in [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/reset"),
        ("GET", "/requests"),
        ("GET", "/faults"),
        ("DELETE", "/faults/1"),
    ]:
        answer = await plane.request(method, f"/_admin/tenants/{tenant['id']}{path}", headers=ADMIN)
        assert_error(answer, 404, "not_found")
    journal = (await plane.get("/_admin/requests", headers=ADMIN)).json()["requests"]
    assert [entry["status"] for entry in journal] == [401]
    assert (await plane.get("/_admin/tenants", headers=ADMIN)).json() == {"tenants": []}


async def test_tenants_are_listed_with_their_times(plane: httpx.AsyncClient) -> None:
    """GET /_admin/tenants and /_admin/tenants/{id}: id, pets, created and lastUsed."""
    first, second = await mint(plane), await mint(plane, pets=[REX])
    [before, _] = await tenants(plane)  # listing them is no use of any
    await plane.get("/v1/pets", headers=bearer(first))
    [after, _] = await tenants(plane)
    shown = (await plane.get(f"/_admin/tenants/{first['id']}", headers=ADMIN)).json()
    assert shown == {**after, "lastUsed": shown["lastUsed"]}  # itself a use of the tenant
    assert shown["lastUsed"] > after["lastUsed"]
    assert RFC3339_UTC.fullmatch(after["created"]) and RFC3339_UTC.fullmatch(after["lastUsed"])
    assert after["created"] == before["created"] <= before["lastUsed"] < after["lastUsed"]
    listed = (await plane.get("/_admin/tenants", headers=ADMIN)).json()["tenants"]
    assert [(t["id"], t["pets"]) for t in listed] == [(first["id"], 0), (second["id"], 1)]
    assert_error(await plane.get("/_admin/tenants/nope", headers=ADMIN), 404, "not_found")
    assert_error(await plane.get("/_admin/tenants", headers=bearer(first)), 401, "unauthorized")


async def test_one_tenant_past_the_limit_is_a_409() -> None:
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), max_tenants=2)
    async with running(create_app(settings, MemoryStore())) as plane:
        kept = [await mint(plane), await mint(plane)]
        answer = await plane.post("/_admin/tenants", json={}, headers=ADMIN)
        assert "2" in assert_error(answer, 409, "tenant_limit_reached")
        await plane.delete(f"/_admin/tenants/{kept[0]['id']}", headers=ADMIN)
        await mint(plane)


async def test_an_idle_tenant_is_deleted_by_itself_and_a_used_one_is_not() -> None:
    """Unused for --tenant-idle-seconds: gone within a few seconds; a request with its key or
    on its paths is a use, listing them all is not."""
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), tenant_idle_seconds=2.5)
    async with running(create_app(settings, MemoryStore())) as plane:
        idle, used, watched = await mint(plane), await mint(plane), await mint(plane)
        deadline = time.monotonic() + 10
        while any(t["id"] == idle["id"] for t in await tenants(plane)):
            assert time.monotonic() < deadline, "the idle tenant is still there"
            assert (await plane.get("/v1/pets", headers=bearer(used))).status_code == 200
            answer = await plane.get(f"/_admin/tenants/{watched['id']}", headers=ADMIN)
            assert answer.status_code == 200
            await asyncio.sleep(0.1)  # a pace of uses, not synchronisation: the loop waits
        assert {t["id"] for t in await tenants(plane)} == {used["id"], watched["id"]}
        assert_error(await plane.get("/v1/pets", headers=bearer(idle)), 401, "unauthorized")


async def tenants(plane: httpx.AsyncClient) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = (await plane.get("/_admin/tenants", headers=ADMIN)).json()[
        "tenants"
    ]
    return listed


async def test_tenants_live_in_memory_whatever_the_configured_store(tmp_path: Path) -> None:
    """With a data file and a seed: a tenant starts from the seed, its pets never reach the
    file, and its reset works (the plane's own is a 409 there)."""
    data, seed = tmp_path / "pets.jsonl", [SeedPet(name="Seed", categoryId=9)]
    async with running(create_app(PLANE, FileStore(str(data), seed_pets(seed)))) as plane:
        tenant = await mint(plane)
        assert tenant["pets"] == 1
        assert (await plane.post("/v1/pets", json=REX, headers=bearer(tenant))).json()["id"] == 2
        assert (await plane.post("/v1/pets", json=TOM, headers=AUTH)).json()["id"] == 2
        reset = await plane.post(f"/_admin/tenants/{tenant['id']}/reset", headers=ADMIN)
        assert reset.json() == {"pets": 1}
        assert_error(await plane.post("/_admin/reset", headers=ADMIN), 409, "reset_unavailable")
    lines = [json.loads(line) for line in data.read_text().splitlines()]
    assert [line["pet"]["name"] if "pet" in line else line["name"] for line in lines] == [
        "Seed",
        "Tom",
    ]


@pytest.mark.parametrize("journal", ["/_admin/requests", "/_admin/tenants/{id}/requests"])
async def test_a_journal_read_waits_for_the_requests_it_asks_for(
    plane: httpx.AsyncClient, journal: str
) -> None:
    """atLeast and waitMs: the answer comes once N entries match, complete; or when the wait
    runs out, not complete; without atLeast there is no `complete`."""
    tenant = await mint(plane)
    path, who = (
        journal.format(id=tenant["id"]),
        AUTH if "tenants" not in journal else bearer(tenant),
    )
    waiting = asyncio.create_task(
        plane.get(path, params={"atLeast": 2, "waitMs": 30000, "method": "POST"}, headers=ADMIN)
    )
    await plane.get("/v1/pets", headers=who)  # a GET: matches nothing the wait asks for
    await plane.post("/v1/pets", json=REX, headers=who)
    assert not waiting.done()
    await plane.post("/v1/pets", json=TOM, headers=who)
    answer = (await waiting).json()
    assert answer["complete"] is True
    assert [e["method"] for e in answer["requests"]] == ["POST", "POST"]

    ran_out = await plane.get(path, params={"atLeast": 4, "waitMs": 50}, headers=ADMIN)
    assert ran_out.json()["complete"] is False
    assert len(ran_out.json()["requests"]) == 3
    at_once = await plane.get(path, params={"atLeast": 1, "limit": 1}, headers=ADMIN)
    assert at_once.json()["complete"] is True
    assert len(at_once.json()["requests"]) == 1
    assert "complete" not in (await plane.get(path, headers=ADMIN)).json()
    for bad in ({"atLeast": 0}, {"atLeast": 1001}, {"atLeast": 1, "waitMs": 60001}):
        assert_error(await plane.get(path, params=bad, headers=ADMIN), 400, "validation_error")


async def test_a_deleted_tenant_ends_its_waits() -> None:
    app = create_app(PLANE, MemoryStore())
    async with running(app) as plane:
        tenant = await mint(plane)
        path = f"/_admin/tenants/{tenant['id']}/requests"
        params = {"atLeast": 1, "waitMs": 60000}
        waiting = asyncio.create_task(plane.get(path, params=params, headers=ADMIN))
        while not waiting.done() and not waits(app):  # noqa: ASYNC110 - a turn of the loop each
            await asyncio.sleep(0)
        deleted = await plane.delete(f"/_admin/tenants/{tenant['id']}", headers=ADMIN)
        assert deleted.status_code == 204
        answer = await asyncio.wait_for(waiting, 10)
        assert answer.json() == {"requests": [], "dropped": 0, "complete": False}


def waits(app: Petstore) -> int:
    """How many journal reads of the app wait, over every tenant."""
    assert app.plane is not None
    journals = [t.journal for t in (app.tenant, *app.plane.tenants.values()) if t.journal]
    return sum(len(journal.waiters) for journal in journals)


async def test_a_thousand_waits_cost_nothing_while_nothing_arrives() -> None:
    """1,000 open waits: no CPU while no request comes; a request answers those it completes."""
    app = create_app(PLANE, MemoryStore())
    async with running(app) as plane:
        params: dict[str, str | int] = {"atLeast": 1, "waitMs": 60000, "path": "/v1/pets/1"}
        reads = [
            asyncio.create_task(plane.get("/_admin/requests", params=params, headers=ADMIN))
            for _ in range(1000)
        ]
        while waits(app) < 1000 and not any(r.done() for r in reads):  # noqa: ASYNC110
            await asyncio.sleep(0)
        cpu = time.process_time()
        await asyncio.sleep(0.5)  # a span to measure, not synchronisation
        assert time.process_time() - cpu < 0.1
        await plane.get("/v1/pets", headers=AUTH)  # matches none of them
        assert not any(r.done() for r in reads)
        await plane.get("/v1/pets/1", headers=AUTH)
        answers = await asyncio.gather(*reads)
        assert all(a.json()["complete"] is True for a in answers)
        assert waits(app) == 0


async def test_without_a_journal_a_wait_answers_at_once() -> None:
    """--journal-size 0: no entry will come, so a wait is not complete at once."""
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), journal_size=0)
    async with running(create_app(settings, MemoryStore())) as plane:
        params = {"atLeast": 1, "waitMs": 60000}
        answer = await asyncio.wait_for(
            plane.get("/_admin/requests", params=params, headers=ADMIN), 10
        )
        assert answer.json() == {"requests": [], "dropped": 0, "complete": False}


def test_sigterm_answers_the_waits_and_the_service_stops(start_server: ServerFactory) -> None:
    """SIGTERM while a read waits for requests: it answers at once, not complete, and the
    service exits without cutting it."""
    server = start_server("--admin-key", ADMIN_KEY, "--log-level", "trace")
    in_app = "Started scope="  # uvicorn's trace of the app called: the read then waits
    with server.client() as http, concurrent.futures.ThreadPoolExecutor(1) as pool:
        before = server.stderr.count(in_app)
        params = {"atLeast": 1, "waitMs": 60000}
        waiting = pool.submit(http.get, "/_admin/requests", params=params, headers=ADMIN)
        wait_until(lambda: server.stderr.count(in_app) > before, "the read in the app")
        server.process.send_signal(signal.SIGTERM)
        answer = waiting.result(timeout=10)
    assert answer.json() == {"requests": [], "dropped": 0, "complete": False}
    assert server.process.wait(10) in (0, -15)


async def test_the_tenants_gauge_counts_them(plane: httpx.AsyncClient) -> None:
    async def gauge() -> float:
        text = (await plane.get("/metrics")).text
        return float(
            next(n.split()[1] for n in text.splitlines() if n.startswith("petstore_tenants "))
        )

    assert await gauge() == 0
    tenant = await mint(plane)
    await mint(plane)
    assert await gauge() == 2
    await plane.delete(f"/_admin/tenants/{tenant['id']}", headers=ADMIN)
    assert await gauge() == 1


async def test_without_an_admin_key_tenants_are_a_404(client: httpx.AsyncClient) -> None:
    for method in ("GET", "POST"):
        answer = await client.request(method, "/_admin/tenants", headers=ADMIN)
        assert_error(answer, 404, "not_found")


def test_no_tenant_key_reaches_a_log_or_a_journal(start_server: ServerFactory) -> None:
    """A tenant's key sent in a path, a query, a header, a request id and a body: redacted in
    the access log and in both journals."""
    server = start_server("--admin-key", ADMIN_KEY)
    with server.client() as http:
        made = http.post("/_admin/tenants", json={}, headers=ADMIN).json()
        key = made["apiKey"]
        for who in (bearer(made), AUTH):
            http.get(f"/v1/pets/{key}", params={"q": key}, headers={**who, "X-Trace": key})
            http.post("/v1/pets", json={"name": key, "categoryId": 1}, headers=who)
            http.get("/v1/pets", headers={**who, "X-Request-Id": key})
        journals = [
            http.get(path, headers=ADMIN).text
            for path in ("/_admin/requests", f"/_admin/tenants/{made['id']}/requests")
        ]
    server.wait_for_output('"GET /v1/pets/[redacted]"')
    assert server.stop() in (0, -15)
    for text in (server.stdout, server.stderr, *journals):
        assert key not in text
    assert all(journal.count("[redacted]") >= 5 for journal in journals)


def test_sixteen_workers_each_with_a_tenant_see_only_their_own(
    start_server: ServerFactory,
) -> None:
    """16 workers at once against one process, each minting a tenant, creating, reading,
    injecting faults and resetting, while tenants are minted and deleted beside them: each sees
    only its own pets and journal entries, and no request of one is lost."""
    server = start_server("--admin-key", ADMIN_KEY, "--log-level", "warning")

    def worker(number: int) -> None:
        with server.client() as http:
            http.headers["X-Worker"] = str(number)
            tenant = http.post("/_admin/tenants", json={}, headers=ADMIN).json()
            own, base = bearer(tenant), f"/_admin/tenants/{tenant['id']}"
            for round_ in range(3):
                names = [f"w{number}-r{round_}-{i}" for i in range(5)]
                ids = [
                    http.post(
                        "/v1/pets", json={"name": n, "categoryId": number}, headers=own
                    ).json()["id"]
                    for n in names
                ]
                assert ids == [1, 2, 3, 4, 5]
                listed = http.get("/v1/pets", headers=own).json()
                assert [p["name"] for p in listed] == names
                rule = http.post(
                    f"{base}/faults",
                    json={"operation": "getPet", "status": 503, "times": 1},
                    headers=ADMIN,
                )
                assert rule.status_code == 201
                assert http.get("/v1/pets/1", headers=own).status_code == 503
                assert http.get("/v1/pets/1", headers=own).json()["name"] == names[0]
                journal = http.get(f"{base}/requests", headers=ADMIN).json()["requests"]
                assert [e["status"] for e in journal] == [201] * 5 + [200, 503, 200]
                assert all(e["headers"]["x-worker"] == str(number) for e in journal)
                assert http.post(f"{base}/reset", headers=ADMIN).json() == {"pets": 0}
                # Beside it, a tenant minted and deleted: no request of this one is lost.
                other = http.post("/_admin/tenants", json={}, headers=ADMIN).json()
                assert (
                    http.delete(f"/_admin/tenants/{other['id']}", headers=ADMIN).status_code == 204
                )
            assert http.delete(base, headers=ADMIN).status_code == 204

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for done in [pool.submit(worker, number) for number in range(16)]:
            done.result()
    assert server.stop() in (0, -15)
