"""The OpenAPI 3.1 documents of the interface and of the test-control plane, and the /docs page."""

from __future__ import annotations

import html
from http import HTTPStatus
from typing import Any, Final

import msgspec
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import BaseRoute
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]  # ships no types

import schemas

Json = dict[str, Any]
_REF: Final = "#/components/schemas/{name}"
# The status each error code comes with; `injected_fault` comes with each the plane injects.
_STATUSES: Final = {
    **dict.fromkeys(["malformed_json", "validation_error"], 400),
    **dict.fromkeys(["idempotency_conflict", "reset_unavailable", "tenant_limit_reached"], 409),
    **{"unauthorized": 401, "not_found": 404, "payload_too_large": 413},
    **{"unsupported_media_type": 415, "idempotency_key_reused": 422},
    **{"internal_error": 500, "storage_unavailable": 503},
}
# What the plane checks of a fault rule beyond each field, in JSON Schema.
_DROP: Final = {"required": ["drop"], "properties": {"drop": {"const": True}}}
_RETRYABLE: Final = {"properties": {"status": {"enum": list(schemas.RETRY_AFTER_STATUSES)}}}
_RULE_COMBINATIONS: Final = [
    {"anyOf": [{"required": ["status"]}, {"required": ["delayMs"]}, _DROP]},
    {"not": {"allOf": [{"required": ["status"]}, _DROP]}},
    {"if": {"required": ["retryAfter"]}, "then": {"required": ["status"], **_RETRYABLE}},
]


def _tidy(node: Any) -> None:
    """Give each enumeration its type, as client generators want, and each docstring one line."""
    if isinstance(node, dict):
        if isinstance(node.get("enum"), list) and "type" not in node:
            node["type"] = "string" if isinstance(node["enum"][0], str) else "integer"
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())
        node = list(node.values())
    for value in node if isinstance(node, list) else ():
        _tidy(value)


def _components(*types: Any) -> tuple[list[Json], Json]:
    """References to the types' JSON Schemas, and the schemas, made from the Structs by msgspec."""
    refs, found = msgspec.json.schema_components(types, ref_template=_REF)
    _tidy(found)
    return list(refs), found


def _header(text: str, *, required: bool = True, **schema: Any) -> Json:
    return {"description": text, "required": required, "schema": {"type": "string", **schema}}


def _param(name: str, text: str, kind: str = "string", where: str = "query", **more: Any) -> Json:
    return {"name": name, "in": where, **_header(text, required=where == "path", type=kind, **more)}


def _response(text: str, schema: Json | None = None, **headers: Json) -> Json:
    content = {} if schema is None else {"content": {"application/json": {"schema": schema}}}
    return {"description": text, "headers": headers, **content}


_TENANT_ID: Final = _param("tenantId", "Id of the tenant", where="path")
_REQUEST_ID: Final = _header("The request's own X-Request-Id if 1 to 128 visible ASCII, else new")
_DEPRECATED: Final = {
    "Deprecation": _header("RFC 9745 deprecation date", const=schemas.DEPRECATION),
    "Sunset": _header("RFC 8594 removal date", const=schemas.SUNSET),
    "Link": _header('RFC 8288 link to what replaces it, rel="successor-version"'),
}
_RETRY_AFTER: Final = {"Retry-After": _header("Seconds to wait", required=False, type="integer")}


def _operation(
    name: str, doc: str, schema: Json | None = None, codes: str = "", *params: Json, **more: Any
) -> Json:
    """Operation `name`: its 201 (given a `body`), 200 (a `schema`) or 204, and its Errors."""
    body = more.pop("body", None)
    status = 201 if body else 200 if schema else 204
    if body is not None:
        more["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
        codes += " malformed_json validation_error payload_too_large unsupported_media_type"
    errors: dict[int, list[str]] = {}
    for code in dict.fromkeys(["unauthorized", "internal_error", *codes.split()]):
        for error in schemas.INJECTABLE_STATUSES if code == "injected_fault" else [_STATUSES[code]]:
            errors.setdefault(error, []).append(code)
    always = {**(_DEPRECATED if more.get("deprecated") else {}), "X-Request-Id": _REQUEST_ID}
    ok = _response(HTTPStatus(status).phrase, schema, **more.pop("headers", {}), **always)
    responses = {str(status): ok}
    for error, names in sorted(errors.items()):
        retry = error in schemas.RETRY_AFTER_STATUSES and "injected_fault" in names
        # The one Error schema for every error, so that a generated client has one error type.
        responses[str(error)] = _response(
            f"{HTTPStatus(error).phrase}: {', '.join(f'`{name}`' for name in names)}",
            {"$ref": _REF.format(name="Error")},
            **({"WWW-Authenticate": _header("RFC 6750 challenge")} if error == 401 else {}),
            **(_RETRY_AFTER if retry else {}),
            **always,
        )
    more["parameters"] = list(params)
    return {"operationId": name, "description": doc, **more, "responses": responses}


def _document(title: str, server: str, scheme: str, paths: Json, components: Json) -> Json:
    """The document of `paths`, each operation tagged with its one tag and needing its key."""
    tag, key = ("animals", "API key") if scheme == "bearerAuth" else ("control", "admin key")
    for item in paths.values():
        for operation in item.values():
            operation |= {"tags": [tag], "summary": operation["description"]}
    security = {"type": "http", "scheme": "bearer", "description": f"Authorization: Bearer <{key}>"}
    mit = {"name": "MIT", "identifier": "MIT"}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1.0.0", "license": mit},
        "servers": [{"url": server}],
        "tags": [{"name": tag, "description": title}],
        "security": [{scheme: []}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {scheme: security}},
    }


def openapi_document(root_path: str, *, plane: bool) -> Json:
    """The three operations; with `plane`, the faults the test-control plane injects as well."""
    refs, components = _components(schemas.NewPet, schemas.Pet, schemas.PetStatus, schemas.Error)
    new_pet, pet, status = refs[:3]
    limit = _param("limit", "How many animals at most", "integer", minimum=schemas.LIMIT_MIN)
    limit["schema"] |= {"maximum": schemas.LIMIT_MAX, "default": schemas.LIMIT_DEFAULT}
    injected = " injected_fault" if plane else ""
    key = "Makes the create safe to retry: the same key and request get the first 201 again"
    list_pets = _operation(
        "listPets",
        "List animals in ascending id order, a page at a time; the Link header has the next page",
        {"type": "array", "items": pet},
        f"validation_error storage_unavailable{injected}",
        limit,
        {**_param("status", "Only animals with this status"), "schema": status},
        _param("after", "The page after this id", "integer", format="int64", minimum=0),
        headers={"Link": _header('RFC 8288 rel="next" link', required=False)},
    )
    create_pet = _operation(
        "createPet",
        "Add an animal; an omitted status stays omitted",
        pet,
        f"idempotency_conflict idempotency_key_reused storage_unavailable{injected}",
        _param("Idempotency-Key", key, where="header", pattern=schemas.IDEMPOTENCY_KEY_PATTERN),
        headers={
            "Location": _header("Path of the animal"),
            "Idempotent-Replayed": _header("A replay", required=False, const="true"),
        },
        body=new_pet,
    )
    get_pet = _operation(
        "getPet",
        "Fetch one animal; deprecated, gone on the date of its Sunset header: use listPets",
        pet,
        f"validation_error not_found storage_unavailable{injected}",
        _param("petId", "Id of the animal", "integer", "path", format="int64"),
        deprecated=True,
    )
    paths = {"/pets": {"get": list_pets, "post": create_pet}, "/pets/{petId}": {"get": get_pet}}
    return _document("Petstore", root_path + schemas.API_PREFIX, "bearerAuth", paths, components)


def _plane(refs: list[Json], tenant: bool) -> Json:
    """The paths of a tenant's reset, journal and fault rules: the plane's own, or (`tenant`)
    those under /tenants/{tenantId}, each operation's name with Tenant in it (resetTenant)."""
    new_rule, rule, journal, reset_done = refs[:4]
    own = [_TENANT_ID] if tenant else []

    def op(
        name: str, doc: str, schema: Json | None = None, codes: str = "", *more: Any, **body: Any
    ) -> Json:
        return _operation(
            name.format("Tenant" if tenant else ""),
            doc,
            schema,
            codes + " not_found" * tenant,
            *own,
            *more,
            **body,
        )

    filters = [
        _param("method", "Only requests with this method"),
        _param("path", "Only requests for exactly this path"),
        _param("status", "Only requests with this status", "integer", minimum=100, maximum=599),
        _param("limit", "Only the newest N that match", "integer", minimum=1),
        _param(
            "atLeast", "Answer once N match (or waitMs ran out)", "integer", minimum=1, maximum=1000
        ),
        _param(
            "waitMs", "How long atLeast may wait, default 0", "integer", minimum=0, maximum=60000
        ),
    ]
    reset = "Put back the pets of the start, ids too, and empty the journal, faults and keys"
    rule_id = _param("ruleId", "Id of the rule", "integer", "path", minimum=1)
    rules = {"type": "array", "items": rule}
    prefix = "/tenants/{tenantId}" if tenant else ""
    return {
        f"{prefix}/reset": {"post": op("reset{}", reset, reset_done, "reset_unavailable")},
        f"{prefix}/requests": {
            "get": op("list{}Requests", "Requests to /v1", journal, "validation_error", *filters),
            "delete": op("clear{}Requests", "Forget the requests"),
        },
        f"{prefix}/faults": {
            "post": op("add{}Fault", "Make a fault rule", rule, body=new_rule),
            "get": op("list{}Faults", "The rules, oldest first", rules),
            "delete": op("clear{}Faults", "Remove every fault rule"),
        },
        f"{prefix}/faults/{{ruleId}}": {
            "delete": op("remove{}Fault", "Remove a fault rule", None, "not_found", rule_id)
        },
    }


def _tenants(refs: list[Json]) -> Json:
    """The paths that make, list, show and delete tenants."""
    new_tenant, created, tenant, tenants = refs[4:8]
    make = "Make a tenant: an API key with pets, ids, journal, faults and keys of its own"
    location = {"Location": _header("Path of the tenant")}
    gone = "Delete a tenant: its key is refused from now on"
    return {
        "/tenants": {
            "post": _operation(
                "createTenant",
                make,
                created,
                "tenant_limit_reached",
                body=new_tenant,
                headers=location,
            ),
            "get": _operation("listTenants", "Every tenant, oldest first", tenants),
        },
        "/tenants/{tenantId}": {
            "get": _operation("getTenant", "A tenant", tenant, "not_found", _TENANT_ID),
            "delete": _operation("deleteTenant", gone, None, "not_found", _TENANT_ID),
        },
    }


def admin_openapi_document(root_path: str) -> Json:
    """The test-control plane under /_admin: tenants; reset, the journal and fault rules."""
    plane = (schemas.NewFaultRule, schemas.FaultRule, schemas.Journal, schemas.ResetDone)
    tenants = (schemas.NewTenant, schemas.TenantCreated, schemas.TenantInfo, schemas.TenantList)
    refs, components = _components(*plane, *tenants, schemas.Error)
    components["NewFaultRule"]["allOf"] = _RULE_COMBINATIONS
    paths = {**_plane(refs, False), **_tenants(refs), **_plane(refs, True)}
    server = f"{root_path}{schemas.ADMIN_PREFIX}"
    return _document("Petstore test-control plane", server, "adminAuth", paths, components)


# Only our own files, no inline script or style (the page works offline); Swagger's CSS uses data:
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_PAGE: Final = """<!doctype html>
<html lang="en"><meta charset="utf-8"><title>Petstore API</title>
<link rel="stylesheet" href="{root}/docs/swagger-ui.css">
<link rel="icon" type="image/png" href="{root}/docs/favicon-32x32.png">
<div id="swagger-ui" data-url="{root}{document}"></div>
<script src="{root}/docs/swagger-ui-bundle.js"></script>
<script src="{root}/docs/init.js"></script>
"""
# BaseLayout without the standalone preset, which injects a <style> that the CSP refuses.
_INIT: Final = """SwaggerUIBundle({
  url: document.getElementById("swagger-ui").dataset.url, dom_id: "#swagger-ui",
  presets: [SwaggerUIBundle.presets.apis], layout: "BaseLayout", validatorUrl: null,
});
"""
_FILES: Final = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png", "init.js")
_TYPES: Final = {"js": "text/javascript", "css": "text/css", "png": "image/png"}


async def _page(request: Request) -> Response:
    root = html.escape(request.scope.get("root_path", ""))
    page = _PAGE.format(root=root, document=schemas.OPENAPI_PATH)
    return HTMLResponse(page, headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY})


async def _file(request: Request) -> Response:
    name = request.url.path.rpartition("/")[2]
    if name == "init.js":
        return Response(_INIT, media_type=_TYPES["js"])
    return FileResponse(swagger_ui_path / name, media_type=_TYPES[name.rpartition(".")[2]])


def docs_routes() -> list[BaseRoute]:
    """GET /docs, Swagger UI over the interface's document, and the files it loads."""
    route = schemas.Route
    return [route("/docs", _page), *(route(f"/docs/{name}", _file) for name in _FILES)]
