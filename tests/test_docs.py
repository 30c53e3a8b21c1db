"""/docs: Swagger UI from the service's own files, tried in a real browser."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import ConsoleMessage, Error, Locator, Page, expect, sync_playwright

from openapi import CONTENT_SECURITY_POLICY
from settings import Settings
from tests.conftest import KEY, ServerFactory

# Debian's Chromium (.ci/run installs it); Playwright's own browser download can't work here.
CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags Chromium keeps trying hosts this machine can't reach.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
FILES = {
    "/docs/swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "/docs/swagger-ui.css": "text/css; charset=utf-8",
    "/docs/favicon-32x32.png": "image/png",
    "/docs/init.js": "text/javascript; charset=utf-8",
}


@pytest.fixture(params=["", "/api"], ids=["no-root-path", "root-path"])
def settings(request: pytest.FixtureRequest) -> Settings:
    """Every in-process test here runs without and with a root path."""
    return Settings(api_keys=(KEY,), root_path=request.param)


@pytest.mark.anyio
async def test_docs_page_loads_only_the_service_s_files(
    client: httpx.AsyncClient, settings: Settings
) -> None:
    """The docs page needs no key, has the CSP, and names only our files under the root path."""
    # Those files: the CSS, Swagger UI's bundle, our initializer and the document; no inline script.
    root = settings.root_path
    response = await client.get("/docs", headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    page = response.text
    assert re.findall(r'(?:href|src|data-url)="([^"]*)"', page) == [
        f"{root}/docs/swagger-ui.css",
        f"{root}/docs/favicon-32x32.png",
        f"{root}/v1/openapi.json",
        f"{root}/docs/swagger-ui-bundle.js",
        f"{root}/docs/init.js",
    ]
    assert re.findall(r"<script[^>]*>([^<]*)</script>", page) == ["", ""]
    assert "<style" not in page
    assert "http" not in page.replace("http-equiv", "")  # no CDN, no absolute URL


@pytest.mark.anyio
@pytest.mark.parametrize(("path", "content_type"), FILES.items())
async def test_docs_files_are_served_without_a_key(
    client: httpx.AsyncClient, path: str, content_type: str
) -> None:
    """Every file the page loads is there, with its content type."""
    response = await client.get(path, headers={"Authorization": ""})
    assert response.status_code == 200
    assert response.headers["content-type"] == content_type
    assert len(response.content) > 100


@pytest.mark.anyio
async def test_swagger_ui_is_a_version_that_reads_openapi_3_1(client: httpx.AsyncClient) -> None:
    """The bundle is Swagger UI 5 or later: version 4 can't render an OpenAPI 3.1 document."""
    bundle = (await client.get("/docs/swagger-ui-bundle.js")).text
    version = re.search(r'PACKAGE_VERSION:"(\d+)\.', bundle)
    assert version, "no PACKAGE_VERSION in the bundle"
    assert int(version[1]) >= 5


def open_browser_page(playwright_page: Page, base_url: str) -> list[str]:
    """Open /docs and collect what goes wrong: CSP violations, script errors, console errors."""
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            problems.append(f"console: {message.text}")

    def on_page_error(error: Error) -> None:
        problems.append(f"page error: {error}")

    playwright_page.on("console", on_console)
    playwright_page.on("pageerror", on_page_error)
    playwright_page.add_init_script(
        "document.addEventListener('securitypolicyviolation', e => console.error("
        "'CSP violation: ' + e.effectiveDirective + ' ' + e.blockedURI));"
    )
    playwright_page.goto(f"{base_url}/docs")
    return problems


def response_of(operation: Locator) -> tuple[str, object]:
    """The status and the JSON body Swagger UI shows for an operation's last execution."""
    status = operation.locator(".live-responses-table tr.response .response-col_status")
    body = operation.locator(".live-responses-table .response-col_description pre.microlight")
    return status.inner_text().strip(), json.loads(body.first.inner_text())


def test_docs_try_it_out_in_a_real_browser(start_server: ServerFactory, tmp_path: Path) -> None:
    """In Chromium the docs page authorizes, creates and lists a pet, no CSP or script error."""
    # Authorize with the key, try createPet with the body the page fills in (201, the pet) and then
    # listPets (the pet listed); getPet shows as deprecated; no CSP violation or script error on the
    # way.
    assert shutil.which(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    server = start_server()
    screenshot = tmp_path / "docs.png"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1600})
        page.set_default_timeout(15_000)
        try:
            problems = open_browser_page(page, server.base_url)
            page.click("button.authorize")
            page.fill(".modal-ux input[aria-label='auth-bearer-value']", KEY)
            page.click(".modal-ux .auth-btn-wrapper button.authorize")
            page.click(".modal-ux button.btn-done")

            create = page.locator("#operations-animals-createPet")
            create.locator(".opblock-summary-control").click()
            create.locator("button.try-out__btn").click()
            create.locator("button.execute").click()  # the example body, as the page made it
            expect(create.locator(".live-responses-table tr.response")).to_be_visible()
            pet = {"id": 1, "name": "Rex", "categoryId": 1, "status": "available"}
            assert response_of(create) == ("201", pet)

            listing = page.locator("#operations-animals-listPets")
            listing.locator(".opblock-summary-control").click()
            listing.locator("button.try-out__btn").click()
            listing.locator("button.execute").click()
            expect(listing.locator(".live-responses-table tr.response")).to_be_visible()
            assert response_of(listing) == ("200", [pet])

            expect(page.locator("#operations-animals-getPet.opblock-deprecated")).to_be_visible()
            assert problems == []
        finally:
            page.screenshot(path=screenshot, full_page=True)
            browser.close()
    assert screenshot.stat().st_size > 10_000  # the artifact: kept in the test's temp dir
    with server.client() as http:  # the browser's create reached the store
        assert http.get("/v1/pets").json() == [pet]
