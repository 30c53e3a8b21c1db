"""CORS: off unless origins are configured; preflights before the credential, refusals as Error."""

from __future__ import annotations

import http.server
import shutil
import threading

import httpx
import pytest
from playwright.sync_api import sync_playwright

from settings import Settings
from tests.conftest import KEY, ServerFactory, assert_error
from tests.test_control_plane import ADMIN, ADMIN_KEY
from tests.test_docs import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.anyio

APP_ORIGIN = "http://app.example:3000"
OTHER_ORIGIN = "http://evil.example"
WITH_CORS = Settings(api_keys=(KEY,), cors_origins=(APP_ORIGIN,))
ANY_ORIGIN = Settings(api_keys=(KEY,), cors_origins=("*",))
REQUEST_HEADERS = "authorization, content-type, idempotency-key, prefer, x-request-id"
EXPOSED = {
    "location",
    "link",
    "deprecation",
    "sunset",
    "www-authenticate",
    "retry-after",
    "x-request-id",
    "idempotent-replayed",
    "preference-applied",
}


def preflight(origin: str, method: str = "POST", headers: str = REQUEST_HEADERS) -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": headers,
    }


def cors_headers(response: httpx.Response) -> dict[str, str]:
    return {n: v for n, v in response.headers.items() if n.startswith("access-control-")}


def exposed(response: httpx.Response) -> set[str]:
    value = response.headers["access-control-expose-headers"]
    return {name.strip().lower() for name in value.split(",")}


@pytest.mark.parametrize("settings", [WITH_CORS], ids=["cors"])
async def test_allowed_preflight_is_answered_before_the_credential(
    client: httpx.AsyncClient,
) -> None:
    """A preflight from a configured origin, without a key, gets 200 and what it asked for."""
    response = await client.options(
        "/v1/pets", headers={**preflight(APP_ORIGIN), "Authorization": ""}
    )
    assert (response.status_code, response.text) == (200, "OK")
    assert cors_headers(response) == {
        "access-control-allow-origin": APP_ORIGIN,
        "access-control-allow-methods": "GET, HEAD, POST, DELETE",
        "access-control-allow-headers": (
            "Accept, Accept-Language, Authorization, Content-Language, Content-Type,"
            " Idempotency-Key, Prefer, X-Request-Id"
        ),
        "access-control-max-age": "600",
    }
    assert "Origin" in response.headers["vary"]


@pytest.mark.parametrize("settings", [WITH_CORS], ids=["cors"])
@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        pytest.param(preflight(OTHER_ORIGIN), "origin", id="other-origin"),
        pytest.param(preflight(APP_ORIGIN, method="PUT"), "method", id="other-method"),
        pytest.param(
            preflight(APP_ORIGIN, headers="Authorization, X-Secret, prefer"),
            "headers",
            id="other-header",
        ),
        pytest.param(
            preflight(OTHER_ORIGIN, method="PUT", headers="x-a,,x-b"),
            "origin, method, headers",
            id="all-three",
        ),
    ],
)
async def test_refused_preflight_is_an_error_body(
    client: httpx.AsyncClient, headers: dict[str, str], refused: str
) -> None:
    """A refused preflight: 400 validation_error naming what was refused, before the credential."""
    # Refused: a preflight for another origin, another method or another header. No allowance
    # for an origin that is not configured.
    response = await client.options("/v1/pets", headers={**headers, "Authorization": ""})
    assert (response.status_code, response.headers["content-type"]) == (400, "application/json")
    assert response.json() == {
        "code": "validation_error",
        "message": f"Disallowed CORS {refused}: this preflight is refused",
        "status": 400,
    }
    granted = response.headers.get("access-control-allow-origin")
    assert granted == (None if "origin" in refused else APP_ORIGIN)


@pytest.mark.parametrize("settings", [WITH_CORS], ids=["cors"])
@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        pytest.param("GET", "/v1/pets", None, 200, id="listPets"),
        pytest.param("POST", "/v1/pets", {"name": "Rex", "categoryId": 1}, 201, id="createPet"),
        pytest.param("GET", "/v1/pets/9", None, 404, id="getPet-missing"),
    ],
)
async def test_answers_to_an_allowed_origin_expose_the_contract_headers(
    client: httpx.AsyncClient, method: str, path: str, body: object, status: int
) -> None:
    """Real answers carry the origin and expose every header the contract names."""
    response = await client.request(method, path, json=body, headers={"Origin": APP_ORIGIN})
    assert response.status_code == status
    assert response.headers["access-control-allow-origin"] == APP_ORIGIN
    assert exposed(response) == EXPOSED


@pytest.mark.parametrize(
    "settings",
    [Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), cors_origins=(APP_ORIGIN,))],
    ids=["cors-and-plane"],
)
async def test_a_browser_harness_can_clear_the_journal_and_the_rules(
    client: httpx.AsyncClient,
) -> None:
    """A configured origin's page may DELETE the plane's journal and rules and read the answer."""
    # A test harness in the page: the preflight allows the DELETE, and the answer can be read.
    for path in ("/_admin/requests", "/_admin/faults"):
        allowed = await client.options(path, headers=preflight(APP_ORIGIN, method="DELETE"))
        assert allowed.status_code == 200
        assert "DELETE" in allowed.headers["access-control-allow-methods"]
        cleared = await client.delete(path, headers={"Origin": APP_ORIGIN, **ADMIN})
        assert cleared.status_code == 204
        assert cleared.headers["access-control-allow-origin"] == APP_ORIGIN


@pytest.mark.parametrize("settings", [WITH_CORS], ids=["cors"])
async def test_a_401_can_be_read_by_the_browser_app(client: httpx.AsyncClient) -> None:
    """A refused credential still carries CORS headers, so the app can read the challenge."""
    response = await client.get(
        "/v1/pets", headers={"Origin": APP_ORIGIN, "Authorization": "Bearer wrong"}
    )
    assert_error(response, 401, "unauthorized")
    assert response.headers["access-control-allow-origin"] == APP_ORIGIN
    assert "www-authenticate" in exposed(response)


@pytest.mark.parametrize("settings", [WITH_CORS], ids=["cors"])
async def test_another_origin_gets_no_allowance(client: httpx.AsyncClient) -> None:
    """An answer to an origin that is not configured carries no Allow-Origin."""
    response = await client.get("/v1/pets", headers={"Origin": OTHER_ORIGIN})
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize("settings", [ANY_ORIGIN], ids=["any-origin"])
async def test_star_allows_every_origin(client: httpx.AsyncClient) -> None:
    """With `*`, any origin is allowed: Allow-Origin is `*` on preflights and answers."""
    allowed = await client.options("/v1/pets", headers=preflight(OTHER_ORIGIN))
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "*"
    response = await client.get("/v1/pets", headers={"Origin": OTHER_ORIGIN})
    assert response.headers["access-control-allow-origin"] == "*"


async def test_without_the_setting_there_are_no_cors_headers(client: httpx.AsyncClient) -> None:
    """No origins configured: a preflight is an OPTIONS like any other, and no answer has CORS."""
    refused = await client.options(
        "/v1/pets", headers={**preflight(APP_ORIGIN), "Authorization": ""}
    )
    assert_error(refused, 401, "unauthorized")
    assert cors_headers(refused) == {}
    options = await client.options("/v1/pets", headers=preflight(APP_ORIGIN))
    assert_error(options, 405, "method_not_allowed")
    assert cors_headers(options) == {}
    answer = await client.get("/v1/pets", headers={"Origin": APP_ORIGIN})
    assert answer.status_code == 200
    assert cors_headers(answer) == {}


@pytest.mark.parametrize(
    ("args", "env", "allowed"),
    [
        pytest.param(
            ["--cors-origin", APP_ORIGIN, "--cors-origin", "http://b"],
            {},
            {APP_ORIGIN, "http://b"},
            id="flags",
        ),
        pytest.param(
            [],
            {"PETSTORE_CORS_ORIGINS": f"{APP_ORIGIN}, http://b"},
            {APP_ORIGIN, "http://b"},
            id="env",
        ),
        pytest.param(
            ["--cors-origin", APP_ORIGIN],
            {"PETSTORE_CORS_ORIGINS": "http://b"},
            {APP_ORIGIN},
            id="flag-wins",
        ),
    ],
)
def test_origins_from_flags_or_the_environment(
    start_server: ServerFactory, args: list[str], env: dict[str, str], allowed: set[str]
) -> None:
    """The real process allows the configured origins, flags winning over the variable."""
    server = start_server(*args, env=env)
    with server.client() as http:
        for origin in (APP_ORIGIN, "http://b", "http://c"):
            response = http.get("/v1/pets", headers={"Origin": origin})
            assert response.status_code == 200
            granted = response.headers.get("access-control-allow-origin")
            assert (origin, granted) == (origin, origin if origin in allowed else None)


class _AppPage(http.server.BaseHTTPRequestHandler):
    """A browser app's page: any path, an empty document (its scripts are the test's)."""

    def do_GET(self) -> None:
        body = b"<!doctype html><title>app</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


# What the app's page does, in the browser: a keyed create sent twice (the second replayed),
# the list without a key; each answer's status and the headers a script can read.
_FETCHES = """async ([api, key]) => {
    const seen = (r) => ({status: r.status, headers: Object.fromEntries(r.headers.entries())});
    const create = () => fetch(api + "/v1/pets", {
        method: "POST",
        headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json",
                  "Idempotency-Key": "browser-1", "X-Request-Id": "from-the-app"},
        body: JSON.stringify({name: "Rex", categoryId: 1}),
    });
    const first = await create();
    const again = await create();
    const unauthorized = await fetch(api + "/v1/pets");
    return {first: {...seen(first), body: await first.json()}, again: seen(again),
            unauthorized: {...seen(unauthorized), body: await unauthorized.json()}};
}"""


def test_a_browser_app_on_another_origin_uses_the_api(start_server: ServerFactory) -> None:
    """In Chromium, a configured origin's page uses the API; another origin's page gets nothing."""
    # A page of the configured origin (another port) creates with a key, an Idempotency-Key and its
    # own X-Request-Id through the preflight, and reads the headers the contract exposes (Location,
    # X-Request-Id, Idempotent-Replayed, WWW-Authenticate) and a 401's Error. A page of another
    # origin (`localhost` for `127.0.0.1`) gets nothing.
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    pages = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AppPage)
    threading.Thread(target=pages.serve_forever, daemon=True).start()
    app_port = pages.server_address[1]
    server = start_server("--cors-origin", f"http://127.0.0.1:{app_port}")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            try:
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{app_port}/")
                seen = page.evaluate(_FETCHES, [server.base_url, KEY])
                other = browser.new_page()
                other.goto(f"http://localhost:{app_port}/")
                refused = other.evaluate(
                    "api => fetch(api + '/v1/pets').then(() => 'answered', e => e.name)",
                    server.base_url,
                )
            finally:
                browser.close()
    finally:
        pages.shutdown()
        pages.server_close()
    pet = {"id": 1, "name": "Rex", "categoryId": 1}
    first, again, unauthorized = seen["first"], seen["again"], seen["unauthorized"]
    assert (first["status"], first["body"]) == (201, pet)
    assert first["headers"]["location"] == "/v1/pets/1"
    assert first["headers"]["x-request-id"] == "from-the-app"
    assert (again["status"], again["headers"]["idempotent-replayed"]) == (201, "true")
    assert unauthorized["status"] == 401
    assert unauthorized["headers"]["www-authenticate"].startswith("Bearer")
    assert unauthorized["body"]["code"] == "unauthorized"
    assert refused == "TypeError"  # the browser withholds an answer without the allowance
    with server.client() as client:
        assert client.get("/v1/pets").json() == [pet]
