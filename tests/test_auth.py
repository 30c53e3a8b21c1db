"""The bearer credential: checked first on every /v1 path, challenges, rotation, and the log."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from settings import Settings
from tests.conftest import KEY, assert_error

pytestmark = pytest.mark.anyio

JSON = "application/json"
REX = {"name": "Rex", "categoryId": 1}
CHALLENGE = 'Bearer realm="petstore"'
REJECTED_KEY_CHALLENGE = 'Bearer realm="petstore", error="invalid_token"'

# (method, path, Content-Type, body): every kind of /v1 request, good and bad.
REQUESTS = [
    pytest.param("GET", "/v1/pets", None, None, id="listPets"),
    pytest.param("GET", "/v1/pets?limit=0", None, None, id="listPets-bad-limit"),
    pytest.param("POST", "/v1/pets", JSON, b'{"name": "Tom", "categoryId": 2}', id="createPet"),
    pytest.param("POST", "/v1/pets", JSON, b'{"name": "Tom"', id="createPet-malformed"),
    pytest.param("POST", "/v1/pets", JSON, b'{"name": ""}', id="createPet-invalid"),
    pytest.param("POST", "/v1/pets", "text/plain", b"Tom", id="createPet-text"),
    pytest.param("GET", "/v1/pets/1", None, None, id="getPet-existing"),
    pytest.param("GET", "/v1/pets/999", None, None, id="getPet-missing"),
    pytest.param("GET", "/v1/pets/abc", None, None, id="getPet-bad-id"),
    pytest.param("HEAD", "/v1/pets/1", None, None, id="getPet-head"),
    pytest.param("GET", "/v1/whatever", None, None, id="unknown-path"),
    pytest.param("GET", "/v1/store/orders", None, None, id="store-orders"),
    pytest.param("GET", "/v1", None, None, id="version-root"),
    pytest.param("PUT", "/v1/pets", JSON, b"{}", id="wrong-method-pets"),
    pytest.param("DELETE", "/v1/pets/1", None, None, id="wrong-method-pet"),
]

# (Authorization header or None for none at all, the challenge expected).
CREDENTIALS = [
    pytest.param(None, CHALLENGE, id="missing"),
    pytest.param("", CHALLENGE, id="empty-header"),
    pytest.param(f"Basic {KEY}", CHALLENGE, id="basic"),
    pytest.param(f"Token {KEY}", CHALLENGE, id="other-scheme"),
    pytest.param(KEY, CHALLENGE, id="key-without-scheme"),
    pytest.param("Bearer", CHALLENGE, id="bearer-no-token"),
    pytest.param("Bearer    ", CHALLENGE, id="bearer-blank-token"),
    pytest.param("Bearer wrong-key", REJECTED_KEY_CHALLENGE, id="wrong-key"),
    pytest.param(f"Bearer {KEY[:-1]}", REJECTED_KEY_CHALLENGE, id="key-prefix"),
    pytest.param(f"Bearer {KEY}x", REJECTED_KEY_CHALLENGE, id="key-plus-one"),
    pytest.param(f"Bearer {KEY} {KEY}", REJECTED_KEY_CHALLENGE, id="key-twice"),
]


def with_authorization(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    authorization: str | None,
    *,
    content_type: str | None = None,
    body: bytes | None = None,
) -> httpx.Request:
    """A request carrying this Authorization header instead of the client's, or none at all."""
    headers = {} if content_type is None else {"Content-Type": content_type}
    request = client.build_request(method, url, content=body, headers=headers)
    if authorization is None:
        del request.headers["Authorization"]
    else:
        request.headers["Authorization"] = authorization
    return request


async def list_all(client: httpx.AsyncClient) -> Any:
    response = await client.get("/v1/pets", params={"limit": 100})
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize(("authorization", "challenge"), CREDENTIALS)
@pytest.mark.parametrize(("method", "path", "content_type", "body"), REQUESTS)
async def test_request_without_accepted_key_is_401_and_changes_nothing(
    client: httpx.AsyncClient,
    *,
    method: str,
    path: str,
    content_type: str | None,
    body: bytes | None,
    authorization: str | None,
    challenge: str,
) -> None:
    """Any /v1 request without an accepted key is 401 unauthorized with the RFC 6750 challenge."""
    created = await client.post("/v1/pets", json=REX)
    assert created.status_code == 201
    request = with_authorization(
        client, method, path, authorization, content_type=content_type, body=body
    )
    response = await client.send(request)
    assert response.status_code == 401
    assert response.headers["content-type"] == JSON
    assert response.headers["www-authenticate"] == challenge
    assert "allow" not in response.headers
    assert "location" not in response.headers
    if method != "HEAD":
        body_json = response.json()
        assert body_json == {"code": "unauthorized", "message": body_json["message"], "status": 401}
        assert isinstance(body_json["message"], str)
        assert KEY not in body_json["message"]
    assert await list_all(client) == [{"id": 1, **REX}]


@pytest.mark.parametrize(
    "authorization",
    [
        f"Bearer {KEY}",
        f"bearer {KEY}",
        f"BEARER {KEY}",
        f"bEaReR {KEY}",
        f"Bearer  {KEY}",
        f"Bearer     {KEY}",
        f"BEARER   {KEY}",
    ],
)
async def test_scheme_is_case_insensitive_and_spaces_may_repeat(
    client: httpx.AsyncClient, authorization: str
) -> None:
    """`bearer`, `BEARER` and several spaces before the key are all accepted."""
    headers = {"Authorization": authorization}
    created = await client.post("/v1/pets", json=REX, headers=headers)
    assert created.status_code == 201
    assert created.json() == {"id": 1, **REX}
    listed = await client.get("/v1/pets", headers=headers)
    assert listed.status_code == 200
    assert listed.json() == [{"id": 1, **REX}]
    fetched = await client.get("/v1/pets/1", headers=headers)
    assert fetched.status_code == 200
    assert fetched.json() == {"id": 1, **REX}


ROTATION = Settings(api_keys=("key-one", "key-two"))


@pytest.mark.parametrize("settings", [ROTATION], ids=["two-keys"])
@pytest.mark.parametrize("key", ["key-one", "key-two"])
async def test_each_configured_key_is_accepted(client: httpx.AsyncClient, key: str) -> None:
    """With two keys configured (rotation), either one works for every operation."""
    headers = {"Authorization": f"Bearer {key}"}
    created = await client.post("/v1/pets", json=REX, headers=headers)
    assert created.status_code == 201
    listed = await client.get("/v1/pets", headers=headers)
    assert (listed.status_code, listed.json()) == (200, [{"id": 1, **REX}])
    fetched = await client.get("/v1/pets/1", headers=headers)
    assert (fetched.status_code, fetched.json()) == (200, {"id": 1, **REX})


@pytest.mark.parametrize("settings", [ROTATION], ids=["two-keys"])
@pytest.mark.parametrize("key", [KEY, "key-three", "key-on", "key-one,key-two", "KEY-ONE"])
async def test_a_key_not_configured_is_refused(client: httpx.AsyncClient, key: str) -> None:
    """With two keys configured, any other token is 401 with error="invalid_token"."""
    response = await client.get("/v1/pets", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == REJECTED_KEY_CHALLENGE
    body = response.json()
    assert body == {"code": "unauthorized", "message": body["message"], "status": 401}


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-key", "Basic x"])
@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/healthz", {"status": "ok"}),
        ("/readyz", {"status": "ready"}),
        ("/v1/openapi.json", None),
    ],
)
async def test_public_paths_need_no_credential(
    client: httpx.AsyncClient, path: str, expected: Any, authorization: str | None
) -> None:
    """/healthz, /readyz and /v1/openapi.json answer 200 with no key or a wrong one."""
    response = await client.send(with_authorization(client, "GET", path, authorization))
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON
    assert "www-authenticate" not in response.headers
    if expected is None:
        document = response.json()
        assert document["openapi"].startswith("3.1")
        assert document["info"]["version"] == "1.0.0"
    else:
        assert response.json() == expected


LOG_LINE = re.compile(r'\S+ "(?P<method>[A-Z]+) (?P<path>/\S*)" (?P<status>\d{3}) \d+us \S+')


async def test_access_log_has_method_path_status_duration_and_never_the_key(
    client: httpx.AsyncClient, read_access_log: Callable[[], str]
) -> None:
    """One line a request with method, path, status and duration; no key, good or bad, ever."""
    wrong = "not-the-key-but-secret-too"
    await client.post("/v1/pets", json=REX)
    await client.get("/v1/pets", params={"limit": 5})
    await client.get("/v1/pets/1")
    await client.get("/v1/pets/2")
    await client.get("/v1/pets", headers={"Authorization": f"Bearer {wrong}"})
    await client.send(with_authorization(client, "GET", "/v1/pets", f"Basic {KEY}"))
    await client.get("/healthz")
    log = read_access_log()
    lines = log.splitlines()
    parsed = []
    for line in lines:
        match = LOG_LINE.fullmatch(line)
        assert match, line
        parsed.append((match["method"], match["path"], int(match["status"])))
    assert parsed == [
        ("POST", "/v1/pets", 201),
        ("GET", "/v1/pets", 200),
        ("GET", "/v1/pets/1", 200),
        ("GET", "/v1/pets/2", 404),
        ("GET", "/v1/pets", 401),
        ("GET", "/v1/pets", 401),
        ("GET", "/healthz", 200),
    ]
    assert KEY not in log
    assert wrong not in log
    assert "bearer" not in log.lower()
    assert "authorization" not in log.lower()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("authorization", "message"),
    [
        (None, "Missing credential: send Authorization: Bearer <API key>"),
        ("", "Missing credential: send Authorization: Bearer <API key>"),
        ("Basic Zm9vOmJhcg==", "Not a bearer token: send Authorization: Bearer <API key>"),
        ("Bearer", "Not a bearer token: send Authorization: Bearer <API key>"),
        ("Bearer wrong-key", "The API key is not accepted"),
    ],
)
async def test_the_401_says_what_was_sent(
    client: httpx.AsyncClient, authorization: str | None, message: str
) -> None:
    """A credential of another scheme was told it was missing."""
    response = await client.send(with_authorization(client, "GET", "/v1/pets", authorization))
    assert assert_error(response, 401, "unauthorized") == message


async def test_each_401_has_its_own_headers(client: httpx.AsyncClient) -> None:
    """The refusals are made once: what is added to one answer (its request id, getPet's
    deprecation headers) is not carried into the next."""
    for path in ("/v1/pets/1", "/v1/pets/1", "/v1/pets"):
        response = await client.get(path, headers={"Authorization": "Bearer wrong-key"})
        assert_error(response, 401, "unauthorized")
        assert len(response.headers.get_list("x-request-id")) == 1
        assert len(response.headers.get_list("deprecation")) == (0 if path == "/v1/pets" else 1)
