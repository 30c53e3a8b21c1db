"""X-Request-Id: on every response, the client's own when it holds 1 to 128 visible ASCII
characters, else one the service makes, unique within the process; the access log records it."""

from __future__ import annotations

import asyncio
import http.client
import re
from collections.abc import Callable

import httpx
import pytest

from settings import Settings
from store import MemoryStore
from tests.conftest import AUTH, KEY, ServerFactory

pytestmark = pytest.mark.anyio

# What the service makes: a per-process prefix of 8 hex digits and a counter.
MADE = re.compile(r"[0-9a-f]{8}-[0-9a-f]+")
ADMIN_KEY = "admin-key-0123456789"
ORIGIN = "http://app.example"
EVERYTHING_ON = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), cors_origins=(ORIGIN,))
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
NO_KEY = {"Authorization": ""}
REX = {"name": "Rex", "categoryId": 1}

# A request of each kind of answer: (method, path, headers, JSON body, the status it gets).
ANSWERS: dict[str, tuple[str, str, dict[str, str], object, int]] = {
    "200 getPet": ("GET", "/v1/pets/1", {}, None, 200),
    "200 HEAD": ("HEAD", "/v1/pets", {}, None, 200),
    "201 createPet": ("POST", "/v1/pets", {}, REX, 201),
    "400 bad id": ("GET", "/v1/pets/abc", {}, None, 400),
    "401 no key": ("GET", "/v1/pets/1", NO_KEY, None, 401),
    "401 admin": ("GET", "/_admin/requests", {}, None, 401),
    "404 no pet": ("GET", "/v1/pets/99", {}, None, 404),
    "404 no route": ("GET", "/nowhere", NO_KEY, None, 404),
    "405": ("DELETE", "/v1/pets", {}, None, 405),
    "200 healthz": ("GET", "/healthz", NO_KEY, None, 200),
    "200 metrics": ("GET", "/metrics", NO_KEY, None, 200),
    "200 docs": ("GET", "/docs", NO_KEY, None, 200),
    "200 openapi": ("GET", "/v1/openapi.json", NO_KEY, None, 200),
    "204 admin": ("DELETE", "/_admin/faults", ADMIN, None, 204),
    "503 injected": ("GET", "/v1/pets", {"Prefer": "code=503"}, None, 503),
    "200 preflight": (
        "OPTIONS",
        "/v1/pets",
        {"Origin": ORIGIN, "Access-Control-Request-Method": "GET", **NO_KEY},
        None,
        200,
    ),
    "400 refused preflight": (
        "OPTIONS",
        "/v1/pets",
        {"Origin": "http://elsewhere.example", "Access-Control-Request-Method": "GET", **NO_KEY},
        None,
        400,
    ),
}


async def answer(client: httpx.AsyncClient, case: str, request_id: str | None) -> httpx.Response:
    method, path, headers, body, status = ANSWERS[case]
    sent = {**headers, **({"X-Request-Id": request_id} if request_id is not None else {})}
    response = await client.request(method, path, headers=sent, json=body)
    assert response.status_code == status, response.text
    return response


@pytest.mark.parametrize("settings", [EVERYTHING_ON], ids=["plane-cors"])
@pytest.mark.parametrize("case", ANSWERS)
async def test_every_answer_echoes_the_client_s_id_or_carries_a_made_one(
    client: httpx.AsyncClient, case: str
) -> None:
    """Each kind of answer carries the id the client sent, or one made for it."""
    # The kinds: errors, probes, docs, metrics, the plane's, injected faults, CORS preflights
    # accepted and refused.
    await client.post("/v1/pets", json=REX)
    echoed = await answer(client, case, "from-the-client")
    assert echoed.headers.get_list("x-request-id") == ["from-the-client"]
    made = await answer(client, case, None)
    assert MADE.fullmatch(made.headers["x-request-id"])


async def test_a_500_carries_the_client_s_id_or_a_made_one(
    client: httpx.AsyncClient, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An internal error is answered with the request's id like any other answer."""

    async def broken(pet_id: int) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(store, "get", broken)
    echoed = await client.get("/v1/pets/1", headers={"X-Request-Id": "the-500"})
    made = await client.get("/v1/pets/1")
    assert (echoed.status_code, made.status_code) == (500, 500)
    assert echoed.headers["x-request-id"] == "the-500"
    assert MADE.fullmatch(made.headers["x-request-id"])


@pytest.mark.parametrize(
    "sent",
    ["a", "trace-1", "x" * 128, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "0123456789ABCDEFabcdef"],
    ids=["one", "word", "128", "punctuation", "alphanumeric"],
)
async def test_an_id_of_1_to_128_visible_ascii_characters_is_kept(
    client: httpx.AsyncClient, sent: str
) -> None:
    """Any visible ASCII character, from one of them up to 128, is the client's id as sent."""
    response = await client.get("/v1/pets", headers={"X-Request-Id": sent})
    assert response.headers["x-request-id"] == sent


@pytest.mark.parametrize(
    "sent",
    [b"", b"x" * 129, b"two words", b"tab\there", b"caf\xc3\xa9", b"del\x7f"],
    ids=["empty", "129", "space", "tab", "non-ascii", "control"],
)
async def test_any_other_id_is_replaced_by_a_made_one(
    client: httpx.AsyncClient, sent: bytes
) -> None:
    """An id that is empty, too long, or has a space, tab, non-ASCII or control byte is replaced."""
    # It is not echoed: the answer carries a made id instead.
    response = await client.get("/v1/pets", headers={b"X-Request-Id": sent})
    assert response.status_code == 200
    assert MADE.fullmatch(response.headers["x-request-id"])


async def test_made_ids_are_unique_across_concurrent_requests(client: httpx.AsyncClient) -> None:
    """300 requests in flight at once, none with an id of its own, get 300 different ids."""
    responses = await asyncio.gather(*(client.get("/v1/pets") for _ in range(300)))
    made = [response.headers["x-request-id"] for response in responses]
    assert all(MADE.fullmatch(request_id) for request_id in made)
    assert len(set(made)) == 300


def test_a_real_process_sends_the_id_on_its_own_answers(start_server: ServerFactory) -> None:
    """Under uvicorn, a 200, a HEAD, a 401 and a 404 carry the id, echoed or made, once each."""
    server = start_server()
    with server.client() as http:
        responses = [
            http.get("/v1/pets", headers={"X-Request-Id": "proc-1"}),
            http.head("/v1/pets", headers={"X-Request-Id": "proc-2"}),
            http.get("/v1/pets/1", headers={**NO_KEY, "X-Request-Id": "proc-3"}),
            http.get("/v1/pets/1", headers=AUTH),
        ]
    assert [response.status_code for response in responses] == [200, 200, 401, 404]
    ids = [response.headers.get_list("x-request-id") for response in responses]
    assert ids[:3] == [["proc-1"], ["proc-2"], ["proc-3"]]
    assert len(ids[3]) == 1
    assert MADE.fullmatch(ids[3][0])


def test_a_real_process_takes_the_first_id_found_as_the_head_is_parsed(
    start_server: ServerFactory,
) -> None:
    """Under uvicorn the first X-Request-Id of any case is taken, or replaced if unusable."""
    # Whitespace after a field's value is not part of it (RFC 9110, 5.5): "first-1 " is kept.
    server = start_server()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    ids = []
    for headers in (
        [("X-REQUEST-ID", "first-1 "), ("x-request-id", "second-1")],
        [("Accept", "*/*"), ("x-request-id", "late-2")],
        [("X-Request-Id", "not usable"), ("X-Request-Id", "usable-3")],
        [("X-Request-Id", "")],
    ):
        connection.putrequest("GET", "/v1/pets")
        for name, value in [*server.headers.items(), *headers]:
            connection.putheader(name, value)
        connection.endheaders()
        response = connection.getresponse()
        response.read()
        ids.append(response.headers["x-request-id"])
    connection.close()
    assert ids[:2] == ["first-1", "late-2"]
    assert MADE.fullmatch(ids[2]) and MADE.fullmatch(ids[3]) and ids[2] != ids[3]


async def test_the_access_log_records_the_id_each_answer_carries(
    client: httpx.AsyncClient, read_access_log: Callable[[], str]
) -> None:
    """The access-log line of a request ends with the id its answer carried, echoed or made."""
    echoed = await client.get("/v1/pets", headers={"X-Request-Id": "logged-1"})
    made = await client.get("/v1/pets", headers={"X-Request-Id": "not usable"})
    lines = read_access_log().splitlines()
    ids = [echoed.headers["x-request-id"], made.headers["x-request-id"]]
    assert ids[0] == "logged-1"
    assert MADE.fullmatch(ids[1])
    assert len(lines) == len(ids)
    for line, request_id in zip(lines, ids, strict=True):
        assert re.fullmatch(f'127\\.0\\.0\\.1 "GET /v1/pets" 200 [0-9]+us {request_id}', line), line
