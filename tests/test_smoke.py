"""The two ways in work end to end: in-process and as a real process."""

import httpx
import pytest

from tests.conftest import ServerFactory

pytestmark = pytest.mark.anyio


async def test_create_then_get_in_process(client: httpx.AsyncClient) -> None:
    """A created pet comes back from getPet with the same fields."""
    created = await client.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
    assert created.status_code == 201
    fetched = await client.get(created.headers["Location"])
    assert fetched.json() == {"id": 1, "name": "Rex", "categoryId": 1}


def test_create_then_list_real_process(start_server: ServerFactory) -> None:
    """The real process serves a create and a list with the configured key."""
    server = start_server()
    with server.client() as http:
        assert http.post("/v1/pets", json={"name": "Rex", "categoryId": 1}).status_code == 201
        assert http.get("/v1/pets").json() == [{"id": 1, "name": "Rex", "categoryId": 1}]
    assert server.stop() in (0, -15)
