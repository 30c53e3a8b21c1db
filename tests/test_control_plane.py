"""The test-control plane, in-process: off without an admin key; admin auth, reset, the journal,
fault rules and `Prefer`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import Petstore, create_app
from filestore import FileStore
from journal import Journal
from schemas import SeedPet, decode
from settings import Settings
from store import MemoryStore, PetStore, seed_pets
from tests.conftest import AUTH, KEY, ServerFactory, assert_error

pytestmark = pytest.mark.anyio

ADMIN_KEY = "admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
PLANE = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,))
REX = {"name": "Rex", "categoryId": 1}
RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


class Draws:
    """A random source that gives the draws it was handed, in order."""

    def __init__(self, *draws: float) -> None:
        self.draws = list(draws)

    def __call__(self) -> float:
        return self.draws.pop(0)


def plane_app(
    settings: Settings = PLANE,
    store: PetStore | None = None,
    chance: Callable[[], float] = random.random,
) -> Petstore:
    """The app with the plane on; `chance` is its fault rules' random draw."""
    app = create_app(settings, store or MemoryStore())
    if app.tenant.faults is not None:
        app.tenant.faults.chance = chance
    return app


@contextlib.asynccontextmanager
async def running(app: Petstore) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the in-process app (no credential of its own), lifespan started."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app.router),
        httpx.AsyncClient(transport=transport, base_url="http://petstore") as client,
    ):
        yield client


@pytest.fixture
async def plane() -> AsyncIterator[httpx.AsyncClient]:
    async with running(plane_app()) as client:
        yield client


async def add_rule(client: httpx.AsyncClient, **rule: Any) -> dict[str, Any]:
    response = await client.post("/_admin/faults", json=rule, headers=ADMIN)
    assert response.status_code == 201, response.text
    added: dict[str, Any] = response.json()
    return added


async def journal(client: httpx.AsyncClient, **filters: Any) -> dict[str, Any]:
    response = await client.get("/_admin/requests", params=filters, headers=ADMIN)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


# --------------------------------------------------------------------------- off, and keys


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/_admin/reset"),
        ("GET", "/_admin/requests"),
        ("DELETE", "/_admin/requests"),
        ("GET", "/_admin/faults"),
        ("POST", "/_admin/faults"),
        ("DELETE", "/_admin/faults/1"),
        ("GET", "/_admin/openapi.json"),
    ],
)
async def test_without_an_admin_key_the_plane_is_not_there(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    """No admin key configured: every /_admin path is a 404 like any unknown path."""
    response = await client.request(method, path, headers=ADMIN)
    assert_error(response, 404, "not_found")


@pytest.mark.parametrize("prefer", ["code=503", "delay=50", "code=429, delay=10"])
async def test_without_an_admin_key_prefer_is_ignored(
    client: httpx.AsyncClient, prefer: str
) -> None:
    """No admin key: `Prefer` changes nothing and nothing says it was applied."""
    response = await client.get("/v1/pets", headers={"Prefer": prefer})
    assert response.status_code == 200
    assert "preference-applied" not in response.headers


@pytest.mark.parametrize(("settings", "on"), [(Settings(api_keys=(KEY,)), False), (PLANE, True)])
def test_off_means_the_plane_is_not_in_the_request_path(settings: Settings, on: bool) -> None:
    """Without an admin key no journal is kept and no fault is looked for; with one, both are."""
    app = plane_app(settings)
    assert (app.tenant.journal is not None) is on
    assert (app.tenant.faults is not None) is on


@pytest.mark.parametrize(
    ("path", "headers", "realm", "invalid"),
    [
        pytest.param("/_admin/requests", AUTH, "petstore-admin", True, id="api-key-on-admin"),
        pytest.param("/_admin/requests", {}, "petstore-admin", False, id="none-on-admin"),
        pytest.param("/v1/pets", ADMIN, "petstore", True, id="admin-key-on-v1"),
        pytest.param("/v1/pets", {}, "petstore", False, id="none-on-v1"),
    ],
)
async def test_admin_and_api_keys_are_not_interchangeable(
    plane: httpx.AsyncClient, path: str, headers: dict[str, str], realm: str, invalid: bool
) -> None:
    """An API key does not open /_admin, an admin key does not open /v1: 401 and the realm."""
    response = await plane.get(path, headers=headers)
    assert_error(response, 401, "unauthorized")
    challenge = f'Bearer realm="{realm}"' + (', error="invalid_token"' if invalid else "")
    assert response.headers["www-authenticate"] == challenge


async def test_admin_openapi_needs_no_credential_and_v1_keeps_three_operations(
    plane: httpx.AsyncClient,
) -> None:
    """/_admin/openapi.json is public and describes the plane; /v1's still has three operations."""
    admin = await plane.get("/_admin/openapi.json")
    assert admin.status_code == 200
    assert {"/reset", "/requests", "/faults", "/faults/{ruleId}"} <= set(admin.json()["paths"])
    v1 = (await plane.get("/v1/openapi.json")).json()
    operations = [op["operationId"] for item in v1["paths"].values() for op in item.values()]
    assert sorted(operations) == ["createPet", "getPet", "listPets"]


# --------------------------------------------------------------------------- reset


async def test_reset_without_a_seed_empties_the_store_and_restarts_the_ids(
    plane: httpx.AsyncClient,
) -> None:
    """Reset: {"pets": 0}, nothing listed, and the next create gets id 1 again."""
    for _ in range(3):
        await plane.post("/v1/pets", json=REX, headers=AUTH)
    response = await plane.post("/_admin/reset", headers=ADMIN)
    assert (response.status_code, response.json()) == (200, {"pets": 0})
    assert (await plane.get("/v1/pets", headers=AUTH)).json() == []
    created = await plane.post("/v1/pets", json=REX, headers=AUTH)
    assert created.json() == {"id": 1, **REX}


async def test_reset_with_a_seed_goes_back_to_the_seed_ids_included() -> None:
    """Reset of a seeded store: the seed again, and the next id is the one after it."""
    seed = [{"name": "A", "categoryId": 1}, {"id": 7, "name": "B", "categoryId": 2}]
    store = MemoryStore(seed_pets(decode(json.dumps(seed).encode(), list[SeedPet])))
    async with running(plane_app(store=store)) as plane:
        await plane.post("/v1/pets", json=REX, headers=AUTH)
        response = await plane.post("/_admin/reset", headers=ADMIN)
        assert (response.status_code, response.json()) == (200, {"pets": 2})
        assert (await plane.get("/v1/pets", headers=AUTH)).json() == [
            {"id": 1, "name": "A", "categoryId": 1},
            {"id": 7, "name": "B", "categoryId": 2},
        ]
        assert (await plane.post("/v1/pets", json=REX, headers=AUTH)).json()["id"] == 8


async def test_a_seed_that_takes_the_last_id_leaves_a_store_that_takes_no_create() -> None:
    """A seed holding id 2**63 - 1: a create is 503, and /readyz says so, as a data file's would."""
    seed = [{"id": 2**63 - 1, "name": "A", "categoryId": 1}]
    store = MemoryStore(seed_pets(decode(json.dumps(seed).encode(), list[SeedPet])))
    async with running(plane_app(store=store)) as plane:
        created = await plane.post("/v1/pets", json=REX, headers=AUTH)
        ready = await plane.get("/readyz")
    for refused in (created, ready):
        message = assert_error(refused, 503, "storage_unavailable")
        assert message == f"Every id up to {2**63 - 1} is taken: no pet can be added"


async def test_reset_empties_the_journal_and_the_fault_rules(plane: httpx.AsyncClient) -> None:
    """After a reset the journal is empty (dropped 0) and no rule is left."""
    await add_rule(plane, operation="getPet", status=500)
    await plane.get("/v1/pets", headers=AUTH)
    assert (await plane.post("/_admin/reset", headers=ADMIN)).status_code == 200
    assert await journal(plane) == {"requests": [], "dropped": 0}
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == []


async def test_reset_is_refused_with_a_data_file(tmp_path: Path) -> None:
    """A data file never deletes pets: 409 reset_unavailable, and the pets stay."""
    async with running(plane_app(store=FileStore(str(tmp_path / "pets.jsonl")))) as plane:
        await plane.post("/v1/pets", json=REX, headers=AUTH)
        assert_error(await plane.post("/_admin/reset", headers=ADMIN), 409, "reset_unavailable")
        assert (await plane.get("/v1/pets", headers=AUTH)).json() == [{"id": 1, **REX}]


# --------------------------------------------------------------------------- the journal


async def test_journal_is_in_the_order_requests_arrived() -> None:
    """The journal lists requests in the order they arrived, and holds each once it ends."""
    # A request held by a delay is listed before the requests that came after it and ended first:
    # `time` and the order agree, `seq` stays what it was, and `limit` keeps the ones that arrived
    # last. They were in the order they ended: a retry before the try.
    app = plane_app()
    faults = app.tenant.faults
    assert faults is not None
    async with running(app) as plane:
        # Long enough for the next request and a read of the journal, on a loaded machine.
        await add_rule(plane, operation="getPet", delayMs=2000, times=1)
        held = asyncio.create_task(
            plane.get("/v1/pets/1", headers={**AUTH, "X-Request-Id": "first"})
        )
        while faults.rules:  # noqa: ASYNC110 - until it took the rule; that sets no event
            await asyncio.sleep(0)
        await plane.get("/v1/pets/1", headers={**AUTH, "X-Request-Id": "second"})
        before = (await plane.get("/_admin/requests", headers=ADMIN)).json()["requests"]
        await held
        entries = (await plane.get("/_admin/requests", headers=ADMIN)).json()["requests"]
        newest = await plane.get("/_admin/requests?limit=1", headers=ADMIN)
    assert [e["requestId"] for e in before] == ["second"]
    assert [e["requestId"] for e in entries] == ["first", "second"]
    assert entries[1]["seq"] == before[0]["seq"] != entries[0]["seq"]
    assert entries[0]["time"] < entries[1]["time"]
    assert entries[0]["durationMs"] >= 2000
    assert [e["requestId"] for e in newest.json()["requests"]] == ["second"]


async def test_journal_records_each_v1_request_whole_and_oldest_first(
    plane: httpx.AsyncClient,
) -> None:
    """Every field of an entry, for a create, a list with a query, a 401 and a 404."""
    created = await plane.post(
        "/v1/pets",
        content=json.dumps(REX),
        headers={**AUTH, "Content-Type": "application/json", "X-Request-Id": "trace-1"}
        | {"Cookie": "a=b"},
    )
    listed = await plane.get("/v1/pets?limit=5&status=sold", headers=AUTH)
    await plane.get("/v1/pets")  # 401
    await plane.get("/v1/nowhere", headers=AUTH)  # 404
    entries = (await journal(plane))["requests"]
    assert [(e["seq"], e["method"], e["path"], e["status"]) for e in entries] == [
        (1, "POST", "/v1/pets", 201),
        (2, "GET", "/v1/pets", 200),
        (3, "GET", "/v1/pets", 401),
        (4, "GET", "/v1/nowhere", 404),
    ]
    create, listing = entries[0], entries[1]
    assert RFC3339_UTC.fullmatch(create["time"]), create["time"]
    assert create["time"] <= listing["time"]
    assert create["query"] == ""
    assert listing["query"] == "limit=5&status=sold"
    assert create["requestId"] == "trace-1" == created.headers["x-request-id"]
    assert listing["requestId"] == listed.headers["x-request-id"]
    assert isinstance(create["durationMs"], float)
    assert create["durationMs"] >= 0
    assert create["body"] == json.dumps(REX)
    assert "body" not in listing
    assert "bodyTruncated" not in create
    assert create["headers"]["content-type"] == "application/json"
    assert create["headers"]["x-request-id"] == "trace-1"
    assert not {"authorization", "cookie", "proxy-authorization"} & set(create["headers"])
    assert all(name == name.lower() for entry in entries for name in entry["headers"])


async def test_journal_leaves_out_admin_probes_and_docs(plane: httpx.AsyncClient) -> None:
    """/_admin, /healthz, /readyz and /docs are not recorded; /v1/openapi.json is."""
    for path in ("/healthz", "/readyz", "/docs", "/_admin/faults", "/v1/openapi.json"):
        await plane.get(path, headers=ADMIN)
    assert [entry["path"] for entry in (await journal(plane))["requests"]] == ["/v1/openapi.json"]


async def test_journal_filters_and_limit(plane: httpx.AsyncClient) -> None:
    """The journal filters by method, path and status, and limit, alone and together."""
    # path matches exactly; limit keeps the N that arrived last.
    await plane.post("/v1/pets", json=REX, headers=AUTH)  # 1: 201
    await plane.get("/v1/pets", headers=AUTH)  # 2: 200
    await plane.get("/v1/pets/1", headers=AUTH)  # 3: 200
    await plane.get("/v1/pets/2", headers=AUTH)  # 4: 404
    await plane.get("/v1/pets", headers={"X-Request-Id": "mine-5"})  # 5: 401

    async def seqs(**filters: Any) -> list[int]:
        return [entry["seq"] for entry in (await journal(plane, **filters))["requests"]]

    assert await seqs(method="GET") == [2, 3, 4, 5]
    assert await seqs(method="post") == [1]
    assert await seqs(path="/v1/pets") == [1, 2, 5]
    assert await seqs(path="/v1/pets/1") == [3]
    assert await seqs(status=200) == [2, 3]
    assert await seqs(limit=2) == [4, 5]
    assert await seqs(method="GET", status=200, limit=1) == [3]
    assert await seqs(limit=99) == [1, 2, 3, 4, 5]
    assert await seqs(limit="9" * 30) == [1, 2, 3, 4, 5]  # past int64: still a positive integer
    assert await seqs(limit="0" * 30 + "2") == [4, 5]


@pytest.mark.parametrize("query", ["requestId=mine-5", "since=1", "after=2", "x", "limit=1&q=a"])
async def test_journal_refuses_a_filter_it_does_not_have(
    plane: httpx.AsyncClient, query: str
) -> None:
    """A query parameter that is no journal filter is a 400 naming the filters."""
    # Misspelled, or one another tool has: ignored, it matched every request, and an assertion on
    # them passed.
    await plane.get("/v1/pets", headers=AUTH)
    response = await plane.get(f"/_admin/requests?{query}", headers=ADMIN)
    message = assert_error(response, 400, "validation_error")
    assert "is not one of `limit`, `method`, `path`, `status`" in message


@pytest.mark.parametrize(
    "query", ["status=abc", "status=99", "limit=0", "limit=000", "limit=-1", "limit=x", "limit=+1"]
)
async def test_journal_refuses_a_bad_filter(plane: httpx.AsyncClient, query: str) -> None:
    """A status or limit that is not a number in range: 400 validation_error."""
    response = await plane.get(f"/_admin/requests?{query}", headers=ADMIN)
    assert_error(response, 400, "validation_error")


async def test_journal_is_a_ring_that_counts_what_it_dropped() -> None:
    """With --journal-size 3, 10 requests leave the last 3 and dropped 7; a clear resets both."""
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), journal_size=3)
    app = plane_app(settings)
    assert app.tenant.journal is not None
    async with running(app) as plane:
        for number in range(1, 11):
            await plane.get(f"/v1/pets/{number}", headers=AUTH)
            assert len(app.tenant.journal.entries({})) == min(number, 3)
        found = await journal(plane)
        assert [entry["path"] for entry in found["requests"]] == [
            "/v1/pets/8",
            "/v1/pets/9",
            "/v1/pets/10",
        ]
        assert found["dropped"] == 7
        assert (await plane.delete("/_admin/requests", headers=ADMIN)).status_code == 204
        assert await journal(plane) == {"requests": [], "dropped": 0}


async def test_journal_size_zero_records_nothing() -> None:
    """--journal-size 0: no journal is kept, and the journal reads empty."""
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), journal_size=0)
    async with running(plane_app(settings)) as plane:
        await plane.get("/v1/pets", headers=AUTH)
        assert await journal(plane) == {"requests": [], "dropped": 0}


async def test_journal_cuts_a_body_at_4096_bytes(plane: httpx.AsyncClient) -> None:
    """A body over 4096 bytes is kept to its first 4096 with bodyTruncated; one at 4096, whole."""
    long_body = json.dumps({"name": "x" * 5000, "categoryId": 1})
    exact_body = json.dumps({"name": "y" * (4096 - 29), "categoryId": 1})
    assert len(exact_body) == 4096
    for body in (long_body, exact_body):
        await plane.post(
            "/v1/pets", content=body, headers={**AUTH, "Content-Type": "application/json"}
        )
    long_entry, exact_entry = (await journal(plane))["requests"]
    assert (long_entry["body"], long_entry["bodyTruncated"]) == (long_body[:4096], True)
    assert exact_entry["body"] == exact_body
    assert "bodyTruncated" not in exact_entry


async def test_journal_keeps_the_body_the_service_read() -> None:
    """The journal keeps the body createPet read, as far as it read it."""
    # A body sent in pieces, whole; one over --max-body, as far as it was read; none for a create
    # refused before reading (a 401); an injected status's, read for the journal alone.
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), max_body=100)
    async with running(plane_app(settings)) as plane:

        async def pieces(*chunks: bytes) -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        headers = AUTH | {"Content-Type": "application/json"}
        sent = await plane.post(
            "/v1/pets", content=pieces(b'{"name": "Rex", ', b'"categoryId": 1}'), headers=headers
        )
        assert sent.status_code == 201
        too_large = await plane.post(
            "/v1/pets", content=pieces(b"a" * 60, b"b" * 60, b"c" * 60), headers=headers
        )
        assert too_large.status_code == 413
        await plane.post("/v1/pets", json=REX)  # 401
        await add_rule(plane, operation="createPet", status=503, times=1)
        injected = await plane.post("/v1/pets", json=REX, headers=AUTH)
        assert injected.status_code == 503
        entries = (await journal(plane))["requests"]
    assert [entry["status"] for entry in entries] == [201, 413, 401, 503]
    assert entries[0]["body"] == '{"name": "Rex", "categoryId": 1}'
    assert entries[1]["body"] == "a" * 60 + "b" * 60  # the third piece was never read
    assert "body" not in entries[2]
    assert entries[3]["body"] == json.dumps(REX, separators=(",", ":"))


async def test_no_key_of_any_kind_is_in_the_journal(plane: httpx.AsyncClient) -> None:
    """Keys sent where they don't belong are redacted; the credential headers are never kept."""
    # Where they don't belong: another header, its name even, the query, percent-encoded there too,
    # the path, a body.
    await plane.post(
        f"/v1/pets?key={KEY}",
        json={"name": ADMIN_KEY, "categoryId": 1},
        headers={**AUTH, "X-Api-Key": KEY, "Proxy-Authorization": f"Bearer {ADMIN_KEY}"},
    )
    await plane.get(f"/v1/pets/{KEY}", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    encoded = "".join(f"%{byte:02X}" for byte in ADMIN_KEY.encode())
    await plane.get(f"/v1/pets?q={encoded}&limit=1", headers={**AUTH, KEY: "a key as a name"})
    text = (await plane.get("/_admin/requests", headers=ADMIN)).text
    assert KEY not in text
    assert ADMIN_KEY not in text
    assert encoded not in text
    # query, X-Api-Key, body, path; the encoded query, decoded, and a header's name
    assert text.count("[redacted]") == 6
    last = (await journal(plane))["requests"][-1]
    assert last["query"] == "q=[redacted]&limit=1"
    assert last["headers"]["[redacted]"] == "a key as a name"


async def test_a_key_hidden_by_an_encoding_a_case_a_cut_or_another_key_is_redacted() -> None:
    """No key gets through the journal hidden by an encoding, a case, a cut or another key."""
    # The forms tried: as the method's name, JSON-escaped in a body, percent-encoded in a
    # header other than the query, as a header's name (lower-cased by the server), across the body's
    # 4096-byte cut, or inside a longer key. A query parameter that hid one is given out decoded,
    # the others as sent.
    api_key, admin_key = "Abc123key", "xAbc123keyz"  # an API key inside the admin key
    settings = Settings(api_keys=(api_key, "PURGE"), admin_keys=(admin_key,))
    auth = {"Authorization": f"Bearer {api_key}"}
    async with running(plane_app(settings)) as plane:
        await plane.request("PURGE", "/v1/pets", headers=auth)
        escaped = '{"name": "\\u0041bc123key", "categoryId": 1}'
        await plane.post(
            "/v1/pets",
            content=escaped,
            headers={**auth, "Content-Type": "application/json", "X-Abc123key": "a name"},
        )
        await plane.get(f"/v1/pets?q={admin_key}", headers={**auth, "Referer": "/?k=%41bc123key"})
        await plane.get("/v1/pets?q=a%26b%3Dc&p=1%2B1+2&x=%41bc123key", headers=auth)
        cut = '{"name":"' + "n" * (4090 - 9) + api_key + '", "categoryId": 1}'
        await plane.post(
            "/v1/pets", content=cut, headers={**auth, "Content-Type": "application/json"}
        )
        admin = {"Authorization": f"Bearer {admin_key}"}
        response = await plane.get("/_admin/requests", headers=admin)
    text = response.text
    for hidden in (api_key, api_key.lower(), "PURGE", "0041bc123key", "%41bc123key", "Abc123"):
        assert hidden not in text, hidden
    purge, created, listed, encoded, long_one = response.json()["requests"]
    # Only the parameter that hid the key is decoded: the others stay as sent.
    assert encoded["query"] == "q=a%26b%3Dc&p=1%2B1+2&x=[redacted]"
    assert purge["method"] == "[redacted]"
    assert created["body"] == '{"name": "[redacted]", "categoryId": 1}'  # given out unescaped
    assert created["headers"]["x-[redacted]"] == "a name"
    assert (listed["query"], listed["headers"]["referer"]) == ("q=[redacted]", "/?k=[redacted]")
    assert long_one["body"] == cut[:4090] + "[redac"  # cut after it was redacted
    assert long_one["bodyTruncated"] is True


async def test_a_key_with_a_plus_in_a_query_is_redacted_however_the_plus_is_read() -> None:
    """A key holding `+` (base64's), sent in a query with its `+` raw and another character
    percent-encoded, as RFC 3986 encoders write it: `+` read as a space (a form's decoding)
    hides the key, read as itself it is the key. Both readings are redacted."""
    api_key, admin_key = "api.key_0123456789AB", "Adm+in/Key~0123456789=="
    settings = Settings(api_keys=(api_key,), admin_keys=(admin_key,))
    auth = {"Authorization": f"Bearer {api_key}"}
    sent = [
        "Adm+in/Key~0123456789%3D%3D",
        "Adm+in%2FKey~0123456789==",
        "Adm%2Bin/Key~0123456789==",
        # One copy found with `+` read as a space would give the other out, its `+` a space.
        "Adm%2Bin/Key~0123456789==,Adm+in/Key~0123456789%3D%3D",
    ]
    async with running(plane_app(settings)) as plane:
        for query in sent:
            await plane.get(f"/v1/pets?q={query}&p=1+2", headers=auth)
        admin = {"Authorization": f"Bearer {admin_key}"}
        response = await plane.get("/_admin/requests", headers=admin)
    queries = [entry["query"] for entry in response.json()["requests"]]
    assert queries == ["q=[redacted]&p=1+2"] * 3 + ["q=[redacted],[redacted]&p=1+2"]
    for query in sent:
        assert query not in response.text
    assert "in/Key~0123456789" not in response.text


def record(journal_: Journal, query: bytes = b"", body: bytes | None = None) -> None:
    """A POST /v1/pets that ended 201, recorded as the middleware records it."""
    scope = {"method": "POST", "path": "/v1/pets", "root_path": "", "query_string": query}
    journal_.record(
        {**scope, "headers": []},
        status=201,
        started=0.0,
        duration=0.001,
        request_id="id-1",
        body=body,
    )


@pytest.mark.parametrize(
    "body",
    [
        # JSON-escaped across the cut: it takes six bytes a character.
        '{"name":"' + "n" * (4066 - 9) + "".join(f"\\u{ord(c):04x}" for c in KEY) + '"}',
        # Many keys before the cut, each redacted shorter, then one cut off where the kept
        # bytes end: the redacted text was shorter than the limit, and gave that piece out.
        '{"name":"' + KEY * (4200 // len(KEY)) + '"}',
        # A key with a character past U+FFFF, as a surrogate pair's escapes, across the cut.
        '{"name":"' + "n" * (4082 - 9) + "\\u0041\\u0062\\ud83d\\uDE00" + '"}',
    ],
    ids=["escaped", "shortened", "surrogates"],
)
def test_no_piece_of_a_key_is_given_out_at_the_bodys_cut(body: str) -> None:
    """Every key is redacted whole or not given out, however the body's 4096-byte cut falls."""
    # The cut may fall on a key escaped, after keys that redaction shortened, or as a surrogate
    # pair.
    secrets = (KEY, "Ab\U0001f600")
    journal_ = Journal(10, secrets)
    record(journal_, body=body.encode()[: journal_.body_kept])
    (entry,) = journal_.entries({})
    assert entry.bodyTruncated is True
    assert isinstance(entry.body, str)
    assert len(entry.body.encode()) <= 4096
    given = entry.body.rpartition("[redacted]")[2]  # past the last mark: what could hold a piece
    complete = re.sub(r"\\u[0-9a-fA-F]{0,3}$|\\$", "", given)  # an escape cut off: dropped
    unescaped = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m[1], 16)), complete)
    unescaped = unescaped.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    for secret in secrets:
        for size in range(2, len(secret) + 1):
            assert not unescaped.endswith(secret[:size]), (secret[:size], given[-80:])


def test_a_password_with_an_ampersand_across_two_parameters_is_redacted() -> None:
    """A password with a raw `&` across two query parameters is redacted, the query decoded."""
    # A database password may hold a raw `&`: in a query with its other characters percent-encoded
    # it spans two parameters, which decoded one at a time hold no secret; the query is then given
    # out decoded whole, redacted.
    journal_ = Journal(10, [KEY, "p\u00e4&ss+w\u00f6rd"])
    record(journal_, b"x=p%C3%A4&ss%2Bw%C3%B6rd&y=1%2B1")
    record(journal_, b"q=a%26b&x=p%C3%A4%26ss%2Bw%C3%B6rd")
    whole, alone = journal_.entries({})
    assert whole.query == "x=[redacted]&y=1+1"
    assert alone.query == "q=a%26b&x=[redacted]"


async def test_the_journal_takes_what_is_under_v1_past_the_root_path() -> None:
    """/v1 and what is under it, past the root path, and nothing else."""
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), root_path="/store")
    async with running(plane_app(settings)) as plane:
        for path in ("/v1/pets/7", "/v1", "/v10/pets", "/healthz", "/_admin/faults", "/v1/pets"):
            await plane.get(path, headers=AUTH)
        found = await journal(plane)
    assert [entry["path"] for entry in found["requests"]] == ["/v1/pets/7", "/v1", "/v1/pets"]


# --------------------------------------------------------------------------- fault rules


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_status_rule_answers_injected_fault_and_stores_nothing(
    plane: httpx.AsyncClient, status: int
) -> None:
    """A status rule on createPet: that status, injected_fault naming the rule, no pet."""
    rule = await add_rule(plane, operation="createPet", status=status)
    assert rule == {"operation": "createPet", "status": status, "id": 1}
    response = await plane.post("/v1/pets", json=REX, headers=AUTH)
    message = assert_error(response, status, "injected_fault")
    assert "fault rule 1" in message
    assert "retry-after" not in response.headers
    assert (await plane.get("/v1/pets", headers=AUTH)).json() == []


@pytest.mark.parametrize("status", [429, 503])
async def test_retry_after_goes_out_with_the_injected_status(
    plane: httpx.AsyncClient, status: int
) -> None:
    """retryAfter becomes the Retry-After header of the injected answer."""
    await add_rule(plane, operation="*", status=status, retryAfter=30)
    response = await plane.get("/v1/pets", headers=AUTH)
    assert_error(response, status, "injected_fault")
    assert response.headers["retry-after"] == "30"


async def test_rules_match_their_operation_and_the_first_wins(plane: httpx.AsyncClient) -> None:
    """A getPet rule leaves listPets alone; of two rules that match, the older is used."""
    await add_rule(plane, operation="getPet", status=502)
    await add_rule(plane, operation="*", status=504)
    assert (await plane.get("/v1/pets/1", headers=AUTH)).status_code == 502
    assert (await plane.get("/v1/pets", headers=AUTH)).status_code == 504
    assert (await plane.post("/v1/pets", json=REX, headers=AUTH)).status_code == 504
    assert (await plane.get("/v1/openapi.json")).status_code == 200  # not an operation


async def test_a_401_stays_a_401_whatever_the_rules(plane: httpx.AsyncClient) -> None:
    """Rules apply only after the credential check."""
    await add_rule(plane, operation="*", status=503)
    assert_error(await plane.get("/v1/pets"), 401, "unauthorized")


async def test_prefer_waits_for_the_credential_check(plane: httpx.AsyncClient) -> None:
    """`Prefer` without a credential: the 401 at once, nothing injected, nothing applied."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    response = await plane.get("/v1/pets", headers={"Prefer": "code=503, delay=3000"})
    assert loop.time() - began < 2  # the 3 s asked for were not waited
    assert_error(response, 401, "unauthorized")
    assert "preference-applied" not in response.headers


async def test_times_counts_down_and_the_rule_goes(plane: httpx.AsyncClient) -> None:
    """times: 2 serves two requests, shows what is left, then is gone."""
    await add_rule(plane, operation="listPets", status=500, times=2)
    assert (await plane.get("/v1/pets", headers=AUTH)).status_code == 500
    assert [r["times"] for r in (await plane.get("/_admin/faults", headers=ADMIN)).json()] == [1]
    assert (await plane.get("/v1/pets", headers=AUTH)).status_code == 500
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == []
    assert (await plane.get("/v1/pets", headers=AUTH)).status_code == 200


async def test_times_is_exact_under_concurrent_requests(plane: httpx.AsyncClient) -> None:
    """40 requests at once against times: 7: exactly 7 are injected, the rest answered."""
    await add_rule(plane, operation="*", status=503, times=7)
    answers = await asyncio.gather(*(plane.get("/v1/pets", headers=AUTH) for _ in range(40)))
    assert sorted(response.status_code for response in answers) == [200] * 33 + [503] * 7


async def test_probability_uses_the_random_draw() -> None:
    """A rule's probability uses the random draw; a failed draw does not count down times."""
    # probability: 0.5 with draws 0.7, 0.2, 0.5, 0.1: the 2nd and 4th are faulted.
    async with running(plane_app(chance=Draws(0.7, 0.2, 0.5, 0.1))) as plane:
        await add_rule(plane, operation="*", status=500, probability=0.5, times=2)
        statuses = [(await plane.get("/v1/pets", headers=AUTH)).status_code for _ in range(5)]
    assert statuses == [200, 500, 200, 500, 200]


async def test_a_failed_draw_goes_on_to_the_next_rule() -> None:
    """Of two matching rules, the first one whose draw succeeds is used."""
    # Draws 0.9 then 0.1 against a first rule at probability 0.5: the second rule (no draw) answers,
    # then the first.
    async with running(plane_app(chance=Draws(0.9, 0.1))) as plane:
        await add_rule(plane, operation="listPets", status=500, probability=0.5)
        await add_rule(plane, operation="*", status=503)
        statuses = [(await plane.get("/v1/pets", headers=AUTH)).status_code for _ in range(2)]
    assert statuses == [503, 500]


async def test_delay_then_the_usual_answer(plane: httpx.AsyncClient) -> None:
    """delayMs waits, then the request is handled as usual, with no Preference-Applied."""
    # Preference-Applied answers a request's own Prefer: a rule's delay had it empty.
    await add_rule(plane, operation="createPet", delayMs=150)
    loop = asyncio.get_running_loop()
    began = loop.time()
    response = await plane.post("/v1/pets", json=REX, headers=AUTH)
    assert loop.time() - began >= 0.15
    assert (response.status_code, response.json()) == (201, {"id": 1, **REX})
    assert "preference-applied" not in response.headers


async def test_a_delay_does_not_block_other_requests(plane: httpx.AsyncClient) -> None:
    """While a getPet waits out a 5 s delay, listPets and creates are answered."""
    await add_rule(plane, operation="getPet", delayMs=5000)
    waiting = asyncio.create_task(plane.get("/v1/pets/1", headers=AUTH))
    for _ in range(3):
        assert (await plane.post("/v1/pets", json=REX, headers=AUTH)).status_code == 201
    assert (await plane.get("/v1/pets", headers=AUTH)).status_code == 200
    assert not waiting.done()
    waiting.cancel()


async def test_delay_and_status_together(plane: httpx.AsyncClient) -> None:
    """A rule with both waits, then injects the status."""
    await add_rule(plane, operation="listPets", status=503, delayMs=100)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert_error(await plane.get("/v1/pets", headers=AUTH), 503, "injected_fault")
    assert loop.time() - began >= 0.1


async def test_drop_rules_need_the_service_s_own_protocol(plane: httpx.AsyncClient) -> None:
    """In-process there is no connection to close: a drop rule is refused, saying why."""
    response = await plane.post(
        "/_admin/faults", json={"operation": "*", "drop": True}, headers=ADMIN
    )
    assert "python app.py" in assert_error(response, 400, "validation_error")
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == []


async def test_rules_are_listed_and_removed(plane: httpx.AsyncClient) -> None:
    """GET lists in creation order; DELETE one (204, then 404); DELETE all (204)."""
    first = await add_rule(plane, operation="getPet", status=500, probability=0.25)
    second = await add_rule(plane, operation="*", delayMs=10, times=3)
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == [first, second]
    assert (await plane.delete(f"/_admin/faults/{first['id']}", headers=ADMIN)).status_code == 204
    assert_error(
        await plane.delete(f"/_admin/faults/{first['id']}", headers=ADMIN), 404, "not_found"
    )
    assert_error(await plane.delete("/_admin/faults/x", headers=ADMIN), 404, "not_found")
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == [second]
    assert (await plane.delete("/_admin/faults", headers=ADMIN)).status_code == 204
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == []


@pytest.mark.parametrize(
    ("rule", "needle"),
    [
        pytest.param({"status": 500}, "`operation`", id="no-operation"),
        pytest.param({"operation": "deletePet", "status": 500}, "$.operation", id="bad-op"),
        pytest.param({"operation": "*"}, "`status`, `delayMs` or `drop`", id="no-action"),
        pytest.param({"operation": "*", "drop": False}, "`drop`", id="drop-false-only"),
        pytest.param({"operation": "*", "status": 404}, "$.status", id="status-404"),
        pytest.param({"operation": "*", "status": "503"}, "$.status", id="status-string"),
        pytest.param({"operation": "*", "delayMs": -1}, "$.delayMs", id="delay-negative"),
        pytest.param({"operation": "*", "delayMs": 60001}, "$.delayMs", id="delay-too-long"),
        pytest.param({"operation": "*", "delayMs": 1.5}, "$.delayMs", id="delay-float"),
        pytest.param({"operation": "*", "status": 503, "drop": True}, "exclude", id="both"),
        pytest.param(
            {"operation": "*", "status": 500, "retryAfter": 5}, "`retryAfter`", id="retry-500"
        ),
        pytest.param({"operation": "*", "delayMs": 5, "retryAfter": 5}, "`retryAfter`", id="ra"),
        pytest.param({"operation": "*", "status": 503, "times": 2**31}, "$.times", id="times-big"),
        pytest.param(
            {"operation": "*", "status": 503, "retryAfter": 2**31}, "$.retryAfter", id="ra-big"
        ),
        pytest.param(
            {"operation": "*", "status": 503, "retryAfter": -1}, "$.retryAfter", id="ra-negative"
        ),
        pytest.param({"operation": "*", "status": 503, "times": 0}, "$.times", id="times-0"),
        pytest.param(
            {"operation": "*", "status": 503, "probability": 1.5}, "$.probability", id="p-1.5"
        ),
        pytest.param({"operation": "*", "status": 503, "id": 9}, "`id`", id="unknown-field"),
        pytest.param([], "object", id="not-an-object"),
    ],
)
async def test_bad_rule_is_400_naming_the_field(
    plane: httpx.AsyncClient, rule: Any, needle: str
) -> None:
    """A rule the section does not allow: 400 validation_error naming the field; no rule."""
    response = await plane.post("/_admin/faults", json=rule, headers=ADMIN)
    assert needle in assert_error(response, 400, "validation_error")
    assert (await plane.get("/_admin/faults", headers=ADMIN)).json() == []


async def test_numbers_past_a_rule_s_bounds_name_the_field(plane: httpx.AsyncClient) -> None:
    """A number past any bound (`1e999999999`) is a 400 naming the field."""
    headers = {**ADMIN, "Content-Type": "application/json"}
    for huge in (b"1e999999999", b"1e99999999999999999999", b"-1e99999999999999999999"):
        body = b'{"operation": "*", "delayMs": %s}' % huge
        response = await plane.post("/_admin/faults", content=body, headers=headers)
        assert "$.delayMs" in assert_error(response, 400, "validation_error")


@pytest.mark.parametrize(
    ("path", "none"),
    [("/_admin/faults", []), ("/_admin/tenants", {"tenants": []})],
    ids=["faults", "tenants"],
)
async def test_a_plane_post_reads_its_body_as_create_does(path: str, none: object) -> None:
    """A body not sent as JSON is 415; one over --max-body is 413, by its Content-Length or as
    it arrives; none makes anything."""
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), max_body=100)
    body = b'{"operation": "*", "status": 503}' if "faults" in path else b"{}"
    headers, too_large = {**ADMIN, "Content-Type": "application/json"}, body + b" " * 100

    async def stream() -> AsyncIterator[bytes]:
        yield too_large

    async with running(plane_app(settings)) as plane:
        as_text = await plane.post(
            path, content=body, headers={**ADMIN, "Content-Type": "text/plain"}
        )
        assert_error(as_text, 415, "unsupported_media_type")
        for sent in (too_large, stream()):
            answer = await plane.post(path, content=sent, headers=headers)
            assert_error(answer, 413, "payload_too_large")
        assert (await plane.get(path, headers=ADMIN)).json() == none
        assert (await plane.post(path, content=body, headers=headers)).status_code == 201


async def test_a_rule_that_is_not_json_is_malformed(plane: httpx.AsyncClient) -> None:
    """A body that is not JSON: 400 malformed_json."""
    headers = {**ADMIN, "Content-Type": "application/json"}
    response = await plane.post("/_admin/faults", content=b'{"operation":', headers=headers)
    assert_error(response, 400, "malformed_json")


# --------------------------------------------------------------------------- Prefer


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
async def test_prefer_code_answers_that_status(plane: httpx.AsyncClient, status: int) -> None:
    """Prefer: code=N injects N for this request, says so, and stores nothing."""
    response = await plane.post("/v1/pets", json=REX, headers={**AUTH, "Prefer": f"code={status}"})
    assert_error(response, status, "injected_fault")
    assert response.headers["preference-applied"] == f"code={status}"
    assert (await plane.get("/v1/pets", headers=AUTH)).json() == []


async def test_prefer_delay_waits_then_answers(plane: httpx.AsyncClient) -> None:
    """Prefer: delay=N waits N ms, then the usual answer, with Preference-Applied."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    response = await plane.get("/v1/pets", headers={**AUTH, "Prefer": "delay=120"})
    assert loop.time() - began >= 0.12
    assert (response.status_code, response.json()) == (200, [])
    assert response.headers["preference-applied"] == "delay=120"


async def test_prefer_both_and_the_rest_ignored(plane: httpx.AsyncClient) -> None:
    """code and delay together both apply; other preferences are not echoed."""
    response = await plane.get(
        "/v1/pets", headers={**AUTH, "Prefer": "return=minimal, delay=10, code=502"}
    )
    assert_error(response, 502, "injected_fault")
    assert response.headers["preference-applied"] == "delay=10, code=502"


async def test_prefer_headers_are_one_list_whose_first_instances_count(
    plane: httpx.AsyncClient,
) -> None:
    """Two Prefer headers are one list; a repeated preference counts only in its first instance."""
    # RFC 7240, 2: `delay=0, delay=100` waits nothing, and applies `delay=0` alone.
    response = await plane.get(
        "/v1/pets", headers=[*AUTH.items(), ("Prefer", "return=minimal"), ("Prefer", "code=503")]
    )
    assert_error(response, 503, "injected_fault")
    assert response.headers["preference-applied"] == "code=503"
    again = await plane.get(
        "/v1/pets", headers={**AUTH, "Prefer": "delay=0, delay=30000, code=404, code=502"}
    )
    assert again.status_code == 200  # code=404 came first: not injectable, and ignored
    assert again.headers["preference-applied"] == "delay=0"


@pytest.mark.parametrize(
    "prefer",
    [
        "code=404",
        "code=200",
        "delay=60001",
        "delay=-5",
        "code=abc",
        "return=minimal",
        "code=" + "5" * 4301,  # past Python's 4,300 digits for int(): not a 500
        "delay=" + "9" * 4301,
    ],
    ids=lambda prefer: prefer if len(prefer) < 20 else prefer[:9] + "(4301 digits)",
)
async def test_prefer_outside_the_bounds_is_ignored(plane: httpx.AsyncClient, prefer: str) -> None:
    """A preference the plane can't honour is ignored (RFC 7240): the usual answer."""
    response = await plane.get("/v1/pets", headers={**AUTH, "Prefer": prefer})
    assert response.status_code == 200
    assert "preference-applied" not in response.headers


async def test_injected_answers_are_in_the_journal(plane: httpx.AsyncClient) -> None:
    """Faults, like everything else, are recorded with the status that went out."""
    await add_rule(plane, operation="getPet", status=504, times=1)
    await plane.get("/v1/pets/1", headers=AUTH)
    await plane.get("/v1/pets", headers={**AUTH, "Prefer": "code=429"})
    entries = (await journal(plane))["requests"]
    assert [(entry["path"], entry["status"]) for entry in entries] == [
        ("/v1/pets/1", 504),
        ("/v1/pets", 429),
    ]


async def test_an_injected_create_is_journaled_with_its_body(plane: httpx.AsyncClient) -> None:
    """A create given an injected status is journaled with the body it sent; nothing is stored."""
    # Injected by a rule or by its Prefer; the body is read for the journal alone: the attempt its
    # retry is compared with. It once had none. A long one is cut as any other.
    await add_rule(plane, operation="createPet", status=503, times=1)
    body, long_body = json.dumps(REX), json.dumps({**REX, "name": "R" * 10_000})
    keyed = {**AUTH, "Idempotency-Key": "order-1", "Content-Type": "application/json"}
    assert (await plane.post("/v1/pets", content=body, headers=keyed)).status_code == 503
    assert (await plane.post("/v1/pets", content=body, headers=keyed)).status_code == 201
    preferred = {**AUTH, "Prefer": "code=500", "Content-Type": "application/json"}
    assert (await plane.post("/v1/pets", content=long_body, headers=preferred)).status_code == 500
    entries = (await journal(plane))["requests"]
    assert [(entry["status"], entry["body"]) for entry in entries] == [
        (503, body),
        (201, body),
        (500, long_body[:4096]),
    ]
    assert entries[2]["bodyTruncated"] is True
    assert (await plane.get("/v1/pets", headers=AUTH)).json() == [{"id": 1, **REX}]


# --------------------------------------------------------------------------- the real process


def test_drop_closes_the_connection_without_a_byte(start_server: ServerFactory) -> None:
    """A drop rule closes the connection with nothing sent; the next request is served."""
    # On the real process. A drop rule closes the connection, nothing sent. The journal has the
    # dropped one with status null, the access log `-` (no 500 that was never sent), and the metrics
    # count it with status `dropped`.
    server = start_server("--admin-key", ADMIN_KEY)
    with server.client() as http:
        rule = {"operation": "getPet", "drop": True, "times": 1}
        added = http.post("/_admin/faults", json=rule, headers=ADMIN)
        assert added.status_code == 201, added.text
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            head = f"GET /v1/pets/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\r\n"
            sock.sendall(head.encode())
            assert sock.recv(65536) == b""
            # Ended as it was dropped, the client's side still open (it once waited for
            # the client to close it, and was journaled after the requests that came next).
            journaled = http.get("/_admin/requests", headers=ADMIN).json()["requests"]
            assert [entry["status"] for entry in journaled] == [None]
        assert http.get("/v1/pets/1").status_code == 404  # the rule is used up
        entries = http.get("/_admin/requests", headers=ADMIN).json()["requests"]
        assert [(e["path"], e["status"]) for e in entries] == [
            ("/v1/pets/1", None),
            ("/v1/pets/1", 404),
        ]
        counted = {
            sample.labels["status"]: sample.value
            for family in text_string_to_metric_families(http.get("/metrics").text)
            for sample in family.samples
            if sample.name == "petstore_http_requests_total"
            and sample.labels["route"] == "/v1/pets/{petId}"
        }
        assert counted == {"dropped": 1, "404": 1}
        dropped, answered = (entry["requestId"] for entry in entries)
    server.wait_for_output('"GET /v1/pets/1" 404 ')
    assert '"GET /v1/pets/1" - ' in server.stdout
    assert [line.split()[-1] for line in server.stdout.splitlines() if "/v1/pets/1" in line] == [
        dropped,
        answered,
    ]
    assert server.stop() in (0, -15)
    assert "Traceback" not in server.stderr
    assert "ASGI callable" not in server.stderr  # uvicorn did not answer for us


def test_a_dropped_create_always_sees_the_connection_end_never_a_reset(
    start_server: ServerFactory,
) -> None:
    """A dropped create's client sees the connection end, never a reset."""
    # A drop closes lingering: a client that sends its body after the head (as httpx does) sees the
    # connection end (httpx's RemoteProtocolError), never a reset (ReadError), which one drop of a
    # create in three once got.
    server = start_server("--admin-key", ADMIN_KEY)
    tries = 20
    with server.client() as http:
        rule = {"operation": "createPet", "drop": True, "times": tries}
        assert http.post("/_admin/faults", json=rule, headers=ADMIN).status_code == 201
    seen, journaled = [], []
    with server.client() as admin:
        for _ in range(tries):
            with server.client() as client:
                try:
                    client.post("/v1/pets", json={**REX, "name": "R" * 2000})
                except httpx.TransportError as error:
                    seen.append(type(error).__name__)
            # The request ended as it was dropped: in the journal before its client saw the
            # end (it once waited for the client to close its side).
            entries = admin.get("/_admin/requests", headers=ADMIN).json()["requests"]
            journaled.append(sum(entry["status"] is None for entry in entries))
    assert seen == ["RemoteProtocolError"] * tries
    assert journaled == list(range(1, tries + 1))


def test_a_real_process_reads_every_prefer_header_as_one_list(start_server: ServerFactory) -> None:
    """Under uvicorn, Prefer headers of any case are one list; without the plane, ignored."""
    # protocol.StallGuard finds them as each header is parsed, for the faults.
    plane, plain = start_server("--admin-key", ADMIN_KEY), start_server()
    prefer = [("PREFER", "return=minimal"), ("x-other", "code=500"), ("prefer", "code=503")]
    with plane.client() as http:
        response = http.get("/v1/pets", headers=prefer)
        assert_error(response, 503, "injected_fault")
        assert response.headers["preference-applied"] == "code=503"
        assert http.get("/v1/pets").headers.get("preference-applied") is None  # not kept
    with plain.client() as http:
        response = http.get("/v1/pets", headers=prefer)
        assert (response.status_code, response.headers.get("preference-applied")) == (200, None)


def test_a_delay_is_never_shorter_than_asked(start_server: ServerFactory) -> None:
    """An injected delay lasts at least its milliseconds by the journal's clock."""
    # uvloop's timers, counting whole milliseconds, woke the wait up to one early: 99.6 ms for 100.
    server = start_server("--admin-key", ADMIN_KEY)
    with server.client() as http:
        for _ in range(15):
            assert http.get("/v1/pets", headers={"Prefer": "delay=20"}).status_code == 200
        entries = http.get("/_admin/requests", headers=ADMIN).json()["requests"]
    durations = [entry["durationMs"] for entry in entries]
    assert len(durations) == 15
    assert min(durations) >= 20, durations


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--admin-key", ADMIN_KEY, "--journal-size", "2"], {}, id="flags"),
        pytest.param(
            [],
            {"PETSTORE_ADMIN_KEYS": f"other-admin,{ADMIN_KEY}", "PETSTORE_JOURNAL_SIZE": "2"},
            id="env",
        ),
    ],
)
def test_admin_keys_and_journal_size_from_flags_or_environment(
    start_server: ServerFactory, args: list[str], env: dict[str, str]
) -> None:
    """The plane opens with the configured admin key and journal size; no admin key is output."""
    # The admin key and the journal size are configured by flags or the environment.
    server = start_server(*args, env=env)
    with server.client() as http:
        for _ in range(3):
            http.get("/v1/pets")
        found = http.get("/_admin/requests", headers=ADMIN).json()
        assert (len(found["requests"]), found["dropped"]) == (2, 1)
    assert server.stop() in (0, -15)
    assert ADMIN_KEY not in server.stdout + server.stderr
