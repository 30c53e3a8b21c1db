"""Errors in the Error shape: unknown paths, wrong methods, failures inside, and readiness."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app import Petstore
from store import MemoryStore, StorageUnavailable
from tests.conftest import AUTH, assert_error

pytestmark = pytest.mark.anyio

JSON = "application/json"
REX = {"name": "Rex", "categoryId": 1, "status": "sold"}
LEAKED_DETAIL = "secret detail"
LEAKED_PATH = "/home/x.py"


async def list_all(client: httpx.AsyncClient) -> Any:
    response = await client.get("/v1/pets", params={"limit": 100})
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/nope",
        "/pets",
        "/v2/pets",
        "/V1/pets",
        "/v1",
        "/v1/",
        "/v1/store/orders",
        "/v1/store/orders/1",
        "/v1/pets/",
        "/v1/pets/1/",
        "/v1/pets/1/x",
        "/v1/pets//1",
        "/v1/categories",
        "/v1/openapi.json/x",
        "/healthz/x",
    ],
)
async def test_unknown_path_is_404_not_found(
    client: httpx.AsyncClient, path: str, method: str
) -> None:
    """A path the service does not have is 404 not_found in the Error shape, never a redirect."""
    await client.post("/v1/pets", json=REX)
    response = await client.request(method, path, json=REX if method == "POST" else None)
    assert_error(response, 404, "not_found")
    assert "location" not in response.headers
    assert "allow" not in response.headers
    assert await list_all(client) == [{"id": 1, **REX}]


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/pets", "GET, HEAD, POST"),
        ("DELETE", "/v1/pets", "GET, HEAD, POST"),
        ("PATCH", "/v1/pets", "GET, HEAD, POST"),
        ("OPTIONS", "/v1/pets", "GET, HEAD, POST"),
        ("PUT", "/v1/pets/1", "GET, HEAD"),
        ("DELETE", "/v1/pets/1", "GET, HEAD"),
        ("PATCH", "/v1/pets/1", "GET, HEAD"),
        ("POST", "/v1/pets/1", "GET, HEAD"),
        ("DELETE", "/v1/pets/999", "GET, HEAD"),
        ("POST", "/v1/openapi.json", "GET, HEAD"),
        ("POST", "/healthz", "GET, HEAD"),
        ("DELETE", "/readyz", "GET, HEAD"),
    ],
)
async def test_wrong_method_is_405_with_allow(
    client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    """A method a path does not take is 405 method_not_allowed, Allow listing those it does."""
    await client.post("/v1/pets", json=REX)
    response = await client.request(method, path, json=REX)
    assert_error(response, 405, "method_not_allowed")
    assert response.headers["allow"] == allow
    assert await list_all(client) == [{"id": 1, **REX}]


JSON_AUTH = {**AUTH, "Content-Type": JSON}
TOO_LARGE = b" " * (2**20 + 1)


@pytest.mark.parametrize(
    ("method", "path", "headers", "body", "status", "code"),
    [
        pytest.param("GET", "/v1/pets?limit=0", AUTH, None, 400, "validation_error", id="limit"),
        pytest.param("POST", "/v1/pets", JSON_AUTH, b"{", 400, "malformed_json", id="json"),
        pytest.param("POST", "/v1/pets", JSON_AUTH, b"{}", 400, "validation_error", id="schema"),
        pytest.param("GET", "/v1/pets/x", AUTH, None, 400, "validation_error", id="petId"),
        pytest.param("GET", "/v1/pets", {}, None, 401, "unauthorized", id="no-key"),
        pytest.param("GET", "/v1/pets/5", AUTH, None, 404, "not_found", id="no-pet"),
        pytest.param("GET", "/nope", AUTH, None, 404, "not_found", id="no-path"),
        pytest.param("PUT", "/v1/pets", AUTH, None, 405, "method_not_allowed", id="method"),
        pytest.param("POST", "/v1/pets", JSON_AUTH, TOO_LARGE, 413, "payload_too_large", id="big"),
        pytest.param(
            "POST",
            "/v1/pets",
            {**AUTH, "Content-Type": "text/plain"},
            b"x",
            415,
            "unsupported_media_type",
            id="media-type",
        ),
    ],
)
async def test_every_error_body_repeats_the_http_status(
    app: Petstore,
    client: httpx.AsyncClient,
    *,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
    status: int,
    code: str,
) -> None:
    """Whatever the failure, the body is an Error whose `status` is the response's status."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://petstore") as bare:
        response = await bare.request(method, path, headers=headers, content=body)
    assert_error(response, status, code)


async def test_storage_unavailable_on_add_is_503(
    client: httpx.AsyncClient, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that can't take the write answers 503 storage_unavailable, never a 201."""

    async def full(*request: object) -> None:
        raise StorageUnavailable("no space left on the device")

    monkeypatch.setattr(store, "add", full)
    response = await client.post("/v1/pets", json=REX)
    assert_error(response, 503, "storage_unavailable")
    assert "location" not in response.headers
    assert await list_all(client) == []


async def broken(*args: object, **kwargs: object) -> None:
    raise RuntimeError(f"{LEAKED_DETAIL} {LEAKED_PATH}")


@pytest.mark.parametrize(
    ("method_name", "method", "path"),
    [
        ("page", "GET", "/v1/pets"),
        ("page", "GET", "/v1/pets?status=sold&limit=3"),
        ("add", "POST", "/v1/pets"),
        ("get", "GET", "/v1/pets/1"),
    ],
)
async def test_unexpected_exception_is_500_that_tells_nothing(
    client: httpx.AsyncClient,
    *,
    store: MemoryStore,
    monkeypatch: pytest.MonkeyPatch,
    read_access_log: Callable[[], str],
    method_name: str,
    method: str,
    path: str,
) -> None:
    """An exception inside the store is 500 internal_error, no detail, no traceback, no path."""
    monkeypatch.setattr(store, method_name, broken)
    response = await client.request(method, path, json=REX if method == "POST" else None)
    message = assert_error(response, 500, "internal_error")
    for leak in (LEAKED_DETAIL, LEAKED_PATH, "RuntimeError", "Traceback", ".py", "line "):
        assert leak not in response.text
        assert leak not in message
    last_line = read_access_log().splitlines()[-1]
    assert f'"{method} {path.partition("?")[0]}" 500 ' in last_line


async def test_healthz_and_readyz_are_200_once_started(client: httpx.AsyncClient) -> None:
    """After startup, /healthz says ok and /readyz says ready."""
    health = await client.get("/healthz")
    assert (health.status_code, health.headers["content-type"]) == (200, JSON)
    assert health.json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert (ready.status_code, ready.headers["content-type"]) == (200, JSON)
    assert ready.json() == {"status": "ready"}


@pytest.fixture
async def unstarted(app: Petstore) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app whose lifespan has not run: the store is not loaded."""
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://petstore") as c:
        yield c


async def test_readyz_is_503_before_startup(unstarted: httpx.AsyncClient) -> None:
    """Before the lifespan has started, /readyz is 503 storage_unavailable; /healthz is 200."""
    message = assert_error(await unstarted.get("/readyz"), 503, "storage_unavailable")
    assert message == "Not serving requests yet"
    health = await unstarted.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})


async def test_readyz_is_503_after_shutdown(app: Petstore) -> None:
    """/readyz is 503 naming the shutdown from when it begins and after the lifespan ends."""
    # Shutdown begins when SIGTERM calls Health.stop; /readyz is 503 again, its message naming the
    # shutdown.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://petstore") as c:
        async with app.router.lifespan_context(app.router):
            assert (await c.get("/readyz")).status_code == 200
            app.health.stopping = True
            stopping = assert_error(await c.get("/readyz"), 503, "storage_unavailable")
        ended = assert_error(await c.get("/readyz"), 503, "storage_unavailable")
    assert stopping == ended == "Shutting down"
