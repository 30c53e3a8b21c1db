"""getPet: the Pet, 404 and 400, and the deprecation headers on every answer it gives."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app import Petstore
from settings import Settings
from store import MemoryStore
from tests.conftest import AUTH, KEY, assert_error

pytestmark = pytest.mark.anyio

JSON = "application/json"
REX = {"name": "Rex", "categoryId": 1, "status": "available"}
DEPRECATION = "@1767225600"
SUNSET = "Thu, 05 Dec 2030 00:00:00 GMT"
SUCCESSOR = '</v1/pets>; rel="successor-version"'


def assert_deprecated(response: httpx.Response, successor: str = SUCCESSOR) -> None:
    """Deprecation, Sunset and the successor Link, each exactly once."""
    assert response.headers.get_list("deprecation") == [DEPRECATION]
    assert response.headers.get_list("sunset") == [SUNSET]
    assert response.headers.get_list("link") == [successor]


async def create(client: httpx.AsyncClient, new_pet: dict[str, Any]) -> Any:
    response = await client.post("/v1/pets", json=new_pet)
    assert response.status_code == 201
    return response.json()


@pytest.mark.parametrize(
    "new_pet",
    [
        REX,
        {"name": "Tom", "categoryId": -(2**63), "status": "sold"},
        {"name": "N", "categoryId": 0},
    ],
)
async def test_get_existing_pet_is_200_with_the_pet(
    client: httpx.AsyncClient, new_pet: dict[str, Any]
) -> None:
    """getPet of a stored id answers 200 and the Pet, with the deprecation headers."""
    await create(client, {"name": "First", "categoryId": 9})
    await create(client, new_pet)
    response = await client.get("/v1/pets/2")
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON
    assert response.json() == {"id": 2, **new_pet}
    assert_deprecated(response)


@pytest.mark.parametrize("text", ["01", "002", "0" * 19 + "2", "0" * 5000 + "1"])
async def test_leading_zeros_name_the_same_id(client: httpx.AsyncClient, text: str) -> None:
    """petId 01 is the integer 1 and 002 the integer 2, however many zeros lead."""
    # 20 or more leading zeros were once refused as no int64.
    await create(client, REX)
    await create(client, REX)
    response = await client.get(f"/v1/pets/{text}")
    assert response.status_code == 200
    assert response.json() == {"id": int(text.lstrip("0")), **REX}
    assert_deprecated(response)


@pytest.mark.parametrize("pet_id", ["0", "-1", "2", "1000", str(2**63 - 1), str(-(2**63)), "-0"])
async def test_unknown_id_is_404_not_found(client: httpx.AsyncClient, pet_id: str) -> None:
    """An int64 id that no pet has answers 404 not_found, with the deprecation headers."""
    await create(client, REX)
    response = await client.get(f"/v1/pets/{pet_id}")
    assert_error(response, 404, "not_found")
    assert_deprecated(response)


@pytest.mark.parametrize(
    "pet_id",
    [
        "abc",
        "1.5",
        "1.0",
        "1e3",
        str(2**63),
        str(-(2**63) - 1),
        "99999999999999999999",
        "0" * 20 + str(2**63),
        "-" + "0" * 20 + str(2**63 + 1),
        " 1",
        "1 ",
        "0x1",
        "+1",
        "--1",
        "1_000",
        "\u0661",  # ARABIC-INDIC DIGIT ONE
        "true",
        "null",
    ],
)
async def test_non_int64_id_is_400_validation_error(client: httpx.AsyncClient, pet_id: str) -> None:
    """A petId that is not an int64 answers 400 validation_error, deprecation headers too."""
    await create(client, REX)
    response = await client.get(f"/v1/pets/{pet_id}")
    assert "petId" in assert_error(response, 400, "validation_error")
    assert_deprecated(response)


def without_credential(
    client: httpx.AsyncClient, method: str, url: str, authorization: str | None
) -> httpx.Request:
    """A request with this Authorization header, or none at all when it is None."""
    request = client.build_request(method, url)
    if authorization is None:
        del request.headers["Authorization"]
    else:
        request.headers["Authorization"] = authorization
    return request


@pytest.mark.parametrize(
    ("authorization", "challenge"),
    [
        pytest.param(None, 'Bearer realm="petstore"', id="missing"),
        pytest.param(f"Basic {KEY}", 'Bearer realm="petstore"', id="basic"),
        pytest.param("Bearer", 'Bearer realm="petstore"', id="empty-token"),
        pytest.param(
            "Bearer wrong-key", 'Bearer realm="petstore", error="invalid_token"', id="wrong-key"
        ),
    ],
)
@pytest.mark.parametrize("pet_id", ["1", "2", "abc"])
async def test_unauthenticated_get_is_401_with_deprecation_headers(
    client: httpx.AsyncClient, pet_id: str, authorization: str | None, challenge: str
) -> None:
    """getPet without an accepted key is 401, with the deprecation headers like any answer."""
    await create(client, REX)
    request = without_credential(client, "GET", f"/v1/pets/{pet_id}", authorization)
    response = await client.send(request)
    assert_error(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == challenge
    assert_deprecated(response)


async def test_internal_error_in_get_carries_deprecation_headers(
    client: httpx.AsyncClient, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even a 500 from getPet carries Deprecation, Sunset and the successor Link."""

    async def broken(pet_id: int) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(store, "get", broken)
    response = await client.get("/v1/pets/1")
    assert_error(response, 500, "internal_error")
    assert_deprecated(response)


@pytest.mark.parametrize(("pet_id", "status"), [("1", 200), ("2", 404), ("abc", 400)])
async def test_head_answers_like_get_without_a_body(
    client: httpx.AsyncClient, pet_id: str, status: int
) -> None:
    """HEAD on getPet gives GET's status and headers, deprecation included, and no body."""
    await create(client, REX)
    get = await client.get(f"/v1/pets/{pet_id}")
    head = await client.head(f"/v1/pets/{pet_id}")
    assert head.status_code == get.status_code == status
    assert head.content == b""
    assert head.headers["content-type"] == JSON
    assert head.headers["content-length"] == str(len(get.content))
    assert_deprecated(head)


async def test_list_and_create_carry_no_deprecation(client: httpx.AsyncClient) -> None:
    """Only getPet is deprecated: listPets and createPet answers have no Deprecation or Sunset."""
    responses = [
        await client.post("/v1/pets", json=REX),
        await client.get("/v1/pets"),
        await client.get("/v1/pets", params={"limit": 0}),
        await client.post("/v1/pets", content=b"{", headers={"Content-Type": JSON}),
    ]
    assert [response.status_code for response in responses] == [201, 200, 400, 400]
    for response in responses:
        assert "deprecation" not in response.headers
        assert "sunset" not in response.headers
        assert "successor-version" not in response.headers.get("link", "")


@pytest.mark.parametrize("settings", [Settings(api_keys=(KEY,), root_path="/api")], ids=["api"])
@pytest.mark.parametrize(("pet_id", "status"), [("1", 200), ("2", 404), ("x", 400)])
async def test_successor_link_carries_the_root_path(
    client: httpx.AsyncClient, pet_id: str, status: int
) -> None:
    """Behind a proxy that strips /api, the successor Link is </api/v1/pets>."""
    await create(client, REX)
    response = await client.get(f"/v1/pets/{pet_id}")
    assert response.status_code == status
    assert_deprecated(response, successor='</api/v1/pets>; rel="successor-version"')


@pytest.mark.parametrize("authorization", [AUTH["Authorization"], ""], ids=["key", "no key"])
async def test_successor_link_carries_a_root_path_set_by_the_server(
    app: Petstore, authorization: str
) -> None:
    """With root_path /api set by the server, 200s and 401s alike link to </api/v1/pets>."""
    # The server sets it as uvicorn --root-path does.
    transport = httpx.ASGITransport(app=app, root_path="/api")
    async with (
        app.router.lifespan_context(app.router),
        httpx.AsyncClient(transport=transport, base_url="http://petstore") as http,
    ):
        await http.post("/api/v1/pets", json=REX, headers=AUTH)
        response = await http.get("/api/v1/pets/1", headers={"Authorization": authorization})
    assert response.status_code == (200 if authorization else 401)
    assert_deprecated(response, successor='</api/v1/pets>; rel="successor-version"')
