"""The /docs page: Swagger UI from the swagger-ui-bundle-v2 package's files, no CDN, strict CSP."""

from __future__ import annotations

import asyncio
import functools
import html
from collections.abc import Callable
from typing import Final

from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped] # ships no types

from routing import BytesResponse, Endpoint, Handler, per_root_path

DOCS_PATH: Final = "/docs"

# Only the service's own files: no inline script or style (the page's initializer is a file of
# its own), and data: images because Swagger UI's CSS draws its select arrows with them.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)

# Swagger UI's files that the page loads, with their content types (the JS holds non-ASCII).
VENDOR_FILES: Final = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}

# BaseLayout without the standalone preset: that preset injects a <style> the CSP refuses.
INITIALIZER: Final = b"""\
// Starts Swagger UI on the page's #swagger-ui element, whose data-url is the document's URL.
window.ui = SwaggerUIBundle({
  url: document.getElementById("swagger-ui").dataset.url,
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  validatorUrl: null,
  displayRequestDuration: true,
});
"""

PAGE: Final = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Petstore API</title>
<link rel="stylesheet" href="{root}/docs/swagger-ui.css">
<link rel="icon" type="image/png" href="{root}/docs/favicon-32x32.png">
</head>
<body>
<div id="swagger-ui" data-url="{root}{openapi_path}"></div>
<script src="{root}/docs/swagger-ui-bundle.js"></script>
<script src="{root}/docs/init.js"></script>
</body>
</html>
"""

_SECURITY_HEADERS: Final = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
)


@functools.cache
def _vendor_file(name: str) -> bytes:
    """A file of Swagger UI, read on first use (1.5 MB that a start need not pay for)."""
    data: bytes = (swagger_ui_path / name).read_bytes()
    return data


def _file(content_type: str, read: Callable[[], bytes]) -> Handler:
    async def serve(scope: Scope, receive: Receive) -> Response:
        cache = (b"cache-control", b"public, max-age=3600")
        data = await asyncio.to_thread(read)  # the first read is from disk: not on the loop
        return BytesResponse(data, content_type, [*_SECURITY_HEADERS, cache])

    return serve


class Docs:
    """The page and its files, the page written once for each root path it is served under."""

    def __init__(self, openapi_path: str) -> None:
        self.openapi_path = openapi_path
        self.page_for = per_root_path(self._page)

    def _page(self, root_path: str) -> bytes:
        root = html.escape(root_path, quote=True)
        return PAGE.format(root=root, openapi_path=self.openapi_path).encode()

    async def page(self, scope: Scope, receive: Receive) -> Response:
        headers = [*_SECURITY_HEADERS, (b"cache-control", b"no-cache")]
        return BytesResponse(self.page_for(scope), "text/html; charset=utf-8", headers)

    def routes(self) -> list[Route]:
        """/docs and each file it loads."""
        files = {
            name: _file(content_type, functools.partial(_vendor_file, name))
            for name, content_type in VENDOR_FILES.items()
        }
        files["init.js"] = _file("text/javascript; charset=utf-8", lambda: INITIALIZER)
        return [
            Route(DOCS_PATH, Endpoint({"GET": self.page})),
            *(
                Route(f"{DOCS_PATH}/{name}", Endpoint({"GET": serve}))
                for name, serve in files.items()
            ),
        ]
