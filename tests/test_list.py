"""listPets: page size, status filter, ascending order and the rel="next" Link."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from app import Petstore
from settings import Settings
from tests.conftest import AUTH, KEY

pytestmark = pytest.mark.anyio

JSON = "application/json"
STATUSES: tuple[str | None, ...] = ("available", "pending", "sold", None)


async def add_pets(client: httpx.AsyncClient, statuses: Sequence[str | None]) -> list[Any]:
    """One pet per entry, in order (ids 1, 2, ...); None leaves the status out."""
    pets = []
    for number, status in enumerate(statuses, 1):
        new_pet: dict[str, Any] = {"name": f"pet{number}", "categoryId": number % 3}
        if status is not None:
            new_pet["status"] = status
        response = await client.post("/v1/pets", json=new_pet)
        assert response.status_code == 201
        pets.append(response.json())
    assert [pet["id"] for pet in pets] == list(range(1, len(statuses) + 1))
    return pets


def cycling(count: int) -> list[str | None]:
    """`count` statuses cycling through the three values and "omitted"."""
    return [STATUSES[number % len(STATUSES)] for number in range(count)]


def next_link(limit: int, after: int, status: str | None = None, prefix: str = "") -> str:
    query = f"limit={limit}" + (f"&status={status}" if status else "") + f"&after={after}"
    return f'<{prefix}/v1/pets?{query}>; rel="next"'


def assert_page(response: httpx.Response, pets: list[Any], link: str | None) -> None:
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON
    assert response.json() == pets
    assert response.headers.get("link") == link
    assert "deprecation" not in response.headers


async def test_empty_store_lists_an_empty_array(client: httpx.AsyncClient) -> None:
    """With no pets, listPets is 200 [] without a Link."""
    assert_page(await client.get("/v1/pets"), [], None)


async def test_default_limit_is_20(client: httpx.AsyncClient) -> None:
    """Without limit, the first 20 of 25 pets come back, with a Link to the rest."""
    pets = await add_pets(client, cycling(25))
    assert_page(await client.get("/v1/pets"), pets[:20], next_link(20, 20))


@pytest.mark.parametrize(
    ("stored", "limit", "returned", "more"),
    [
        (0, 1, 0, False),
        (1, 1, 1, False),
        (3, 1, 1, True),
        (3, 2, 2, True),
        (3, 3, 3, False),
        (3, 100, 3, False),
        (20, None, 20, False),
        (21, None, 20, True),
        (99, 99, 99, False),
        (100, 99, 99, True),
        (100, 100, 100, False),
        (101, 100, 100, True),
    ],
)
async def test_limit_bounds_the_page_and_link_only_when_more_follow(
    client: httpx.AsyncClient, stored: int, limit: int | None, returned: int, more: bool
) -> None:
    """A page holds min(limit, stored) pets; Link rel="next" is there only if pets follow."""
    pets = await add_pets(client, cycling(stored))
    params = {} if limit is None else {"limit": limit}
    link = next_link(limit or 20, returned) if more else None
    assert_page(await client.get("/v1/pets", params=params), pets[:returned], link)


@pytest.mark.parametrize("limit", [3, 4])
@pytest.mark.parametrize("status", ["available", "pending", "sold"])
async def test_link_absent_when_no_pet_of_the_status_follows(
    client: httpx.AsyncClient, status: str, limit: int
) -> None:
    """A filtered page with no more pets of its status has no Link, though other pets follow."""
    others = [other for other in STATUSES if other != status]
    pets = await add_pets(client, [status, status, status, *others, *others])
    response = await client.get("/v1/pets", params={"limit": limit, "status": status})
    assert_page(response, pets[:3], None)


def link_target(link: str) -> str:
    match = re.fullmatch(r'<([^>]*)>; rel="next"', link)
    assert match, link
    return match.group(1)


@pytest.mark.parametrize("status", ["available", "pending", "sold", None])
@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 23, 100])
async def test_following_next_links_visits_every_pet_once_in_id_order(
    client: httpx.AsyncClient, limit: int, status: str | None
) -> None:
    """Following rel="next" from the first page yields each (matching) pet once, ascending."""
    pets = await add_pets(client, cycling(23))
    expected = [pet for pet in pets if status is None or pet.get("status") == status]
    params: dict[str, Any] = {"limit": limit, **({"status": status} if status else {})}
    response = await client.get("/v1/pets", params=params)
    seen: list[Any] = []
    while True:
        page = expected[len(seen) : len(seen) + limit]
        more = len(seen) + limit < len(expected)
        link = next_link(limit, page[-1]["id"], status) if more else None
        assert_page(response, page, link)
        seen += response.json()
        if link is None:
            break
        response = await client.get(link_target(link))
    assert seen == expected


@pytest.mark.parametrize("status", ["available", "pending", "sold"])
async def test_status_filter_returns_only_pets_with_that_status(
    client: httpx.AsyncClient, status: str
) -> None:
    """status=S returns exactly the pets created with status S, in id order."""
    pets = await add_pets(client, cycling(12))
    expected = [pet for pet in pets if pet.get("status") == status]
    assert len(expected) == 3
    assert_page(await client.get("/v1/pets", params={"status": status}), expected, None)


@pytest.mark.parametrize(
    ("params", "ids", "link"),
    [
        ({"after": 0}, [1, 2, 3, 4, 5, 6, 7, 8], None),
        ({"after": 3}, [4, 5, 6, 7, 8], None),
        ({"after": 3, "limit": 2}, [4, 5], next_link(2, 5)),
        ({"after": 7}, [8], None),
        ({"after": 8}, [], None),
        ({"after": 1000}, [], None),
        ({"after": 2**63 - 1}, [], None),
        ({"after": 1, "status": "pending"}, [2, 6], None),
        ({"after": 2, "status": "pending"}, [6], None),
        ({"after": 0, "status": "sold", "limit": 1}, [3], next_link(1, 3, "sold")),
        ({"after": 3, "status": "sold", "limit": 1}, [7], None),
        ({"after": 4, "status": "available"}, [5], None),
    ],
)
async def test_after_returns_the_pets_past_that_id(
    client: httpx.AsyncClient, params: dict[str, Any], ids: list[int], link: str | None
) -> None:
    """after=ID is exclusive: the page starts at the first (matching) pet above ID."""
    pets = await add_pets(client, cycling(8))
    assert_page(await client.get("/v1/pets", params=params), [pets[i - 1] for i in ids], link)


INVALID_QUERIES = [
    *(
        pytest.param([("limit", text)], "limit", id=f"limit={text!r}")
        for text in [
            "0",
            "101",
            "-1",
            "",
            "abc",
            "1.5",
            "1e2",
            " 5",
            "5 ",
            "+5",
            "0x10",
            "010.0",
            "99999999999999999999",
            "1,2",
            "\u0663",  # ARABIC-INDIC DIGIT THREE: a digit to str.isdigit, not to us
            "true",
        ]
    ),
    *(
        pytest.param([("status", text)], "status", id=f"status={text!r}")
        for text in ["Available", "AVAILABLE", "unknown", "", " sold", "sold ", "1"]
    ),
    *(
        pytest.param([("after", text)], "after", id=f"after={text!r}")
        for text in ["-1", "abc", "", "1.5", "+1", " 1", "9223372036854775808", "1e3"]
    ),
    pytest.param([("limit", "0"), ("status", "sold")], "limit", id="bad-limit-good-status"),
    pytest.param([("limit", "5"), ("status", "nope")], "status", id="good-limit-bad-status"),
]


@pytest.mark.parametrize(("params", "name"), INVALID_QUERIES)
async def test_invalid_query_parameter_is_400(
    client: httpx.AsyncClient, params: list[tuple[str, str]], name: str
) -> None:
    """limit outside 1..100, an unknown status, a bad after or a repeat: 400 validation_error."""
    await add_pets(client, cycling(3))
    response = await client.get("/v1/pets", params=tuple(params))
    assert response.status_code == 400
    assert response.headers["content-type"] == JSON
    body = response.json()
    assert body == {"code": "validation_error", "message": body["message"], "status": 400}
    assert isinstance(body["message"], str)
    assert name in body["message"]
    assert "link" not in response.headers


@pytest.mark.parametrize(
    ("query", "returned", "more"),
    [
        ("foo=bar", 3, False),
        ("offset=2&page=3", 3, False),
        ("LIMIT=1", 3, False),
        ("Status=sold", 3, False),
        ("cursor=2", 3, False),
        ("limit=2&cursor=x", 2, True),
        ("status=sold&sort=desc", 1, False),
    ],
)
async def test_unknown_query_parameters_are_ignored(
    client: httpx.AsyncClient, query: str, returned: int, more: bool
) -> None:
    """Query parameters listPets does not know (names are case-sensitive) change nothing."""
    pets = await add_pets(client, cycling(3))
    expected = pets[2:] if "status=sold" in query else pets[:returned]
    link = next_link(2, 2) if more else None
    assert_page(await client.get(f"/v1/pets?{query}"), expected, link)


@pytest.mark.parametrize("settings", [Settings(api_keys=(KEY,), root_path="/api")], ids=["api"])
async def test_root_path_prefixes_the_next_link(client: httpx.AsyncClient) -> None:
    """Behind a proxy that strips /api, Link (and Location) carry the /api prefix."""
    pets, locations = [], []
    for status in (None, None, "sold"):
        new_pet = {"name": "Rex", "categoryId": 1, **({"status": status} if status else {})}
        created = await client.post("/v1/pets", json=new_pet)
        pets.append(created.json())
        locations.append(created.headers["location"])
    assert locations == ["/api/v1/pets/1", "/api/v1/pets/2", "/api/v1/pets/3"]
    response = await client.get("/v1/pets", params={"limit": 1})
    assert_page(response, pets[:1], next_link(1, 1, prefix="/api"))
    response = await client.get("/v1/pets", params={"limit": 1, "status": "sold"})
    assert_page(response, pets[2:], None)
    # The proxy strips /api again from the link the client follows.
    target = link_target(next_link(1, 1, prefix="/api")).removeprefix("/api")
    assert_page(await client.get(target), pets[1:2], next_link(1, 2, prefix="/api"))


@pytest.fixture
async def api_client(app: Petstore) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a server that sets root_path /api itself (uvicorn --root-path)."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, root_path="/api")
    async with (
        app.router.lifespan_context(app.router),
        httpx.AsyncClient(transport=transport, base_url="http://petstore", headers=AUTH) as c,
    ):
        yield c


async def test_root_path_set_by_the_server_prefixes_the_next_link(
    api_client: httpx.AsyncClient,
) -> None:
    """With root_path /api in the scope and path /api/v1/pets, the Link carries /api."""
    for name in ("Rex", "Tom"):
        created = await api_client.post("/api/v1/pets", json={"name": name, "categoryId": 1})
        assert created.status_code == 201
    assert created.headers["location"] == "/api/v1/pets/2"
    response = await api_client.get("/api/v1/pets", params={"limit": 1})
    assert_page(
        response,
        [{"id": 1, "name": "Rex", "categoryId": 1}],
        next_link(1, 1, prefix="/api"),
    )
    response = await api_client.get(link_target(response.headers["link"]))
    assert_page(response, [{"id": 2, "name": "Tom", "categoryId": 1}], None)
