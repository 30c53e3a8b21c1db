"""The OpenAPI documents: valid 3.1, faithful to the interface's rules, true of the service."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from app import Petstore, create_app
from openapi import admin_openapi_document, openapi_document
from settings import Settings
from store import MemoryStore
from tests.conftest import KEY, ROOT, ServerFactory

ADMIN_KEY = "admin-key-0123456789"

ERROR_CODES = {
    "unauthorized",
    "malformed_json",
    "validation_error",
    "not_found",
    "method_not_allowed",
    "unsupported_media_type",
    "payload_too_large",
    "storage_unavailable",
    "internal_error",
    # The extensions: idempotent creates, the test-control plane.
    "idempotency_conflict",
    "idempotency_key_reused",
    "reset_unavailable",
    "injected_fault",
    "tenant_limit_reached",
}
OPERATIONS = {
    ("/pets", "get"): "listPets",
    ("/pets", "post"): "createPet",
    ("/pets/{petId}", "get"): "getPet",
}
DEPRECATION_HEADERS = {"Deprecation", "Sunset", "Link"}


@pytest.fixture
async def document(app: Petstore) -> AsyncIterator[dict[str, Any]]:
    """The document as the in-process app serves it, fetched without a credential."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://petstore") as client:
        response = await client.get("/v1/openapi.json")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    served: dict[str, Any] = response.json()
    yield served


def resolve(document: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow local `$ref`s (`#/components/...`) until a node that is not a reference."""
    while "$ref" in node:
        target: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def operation(document: dict[str, Any], operation_id: str) -> dict[str, Any]:
    for (path, method), name in OPERATIONS.items():
        if name == operation_id:
            found: dict[str, Any] = document["paths"][path][method]
            return found
    raise AssertionError(f"no operation {operation_id}")


@pytest.mark.anyio
async def test_document_is_valid_openapi_31(document: dict[str, Any]) -> None:
    """The served document passes the OpenAPI 3.1 validator."""
    assert document["openapi"].startswith("3.1.")
    validate(document, cls=OpenAPIV31SpecValidator)


@pytest.mark.anyio
@pytest.mark.parametrize("root_path", ["", "/api"])
async def test_control_plane_document_is_valid_openapi_31(root_path: str) -> None:
    """/_admin/openapi.json passes the validator, its servers under the root path."""
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,), root_path=root_path)
    app = create_app(settings, MemoryStore())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://petstore") as client:
        response = await client.get("/_admin/openapi.json")
    assert response.status_code == 200
    document = response.json()
    validate(document, cls=OpenAPIV31SpecValidator)
    assert document["servers"] == [{"url": f"{root_path}/_admin"}]
    assert document["components"]["securitySchemes"]["adminAuth"]["scheme"] == "bearer"


@pytest.mark.anyio
async def test_document_holds_exactly_the_three_operations_tagged_animals(
    document: dict[str, Any],
) -> None:
    """listPets, createPet and getPet, each tagged `animals`, and no other operation."""
    found = {
        (path, method): spec["operationId"]
        for path, item in document["paths"].items()
        for method, spec in item.items()
    }
    assert found == OPERATIONS
    assert {name: operation(document, name)["tags"] for name in OPERATIONS.values()} == {
        "listPets": ["animals"],
        "createPet": ["animals"],
        "getPet": ["animals"],
    }
    assert [tag["name"] for tag in document["tags"]] == ["animals"]


@pytest.mark.anyio
async def test_every_operation_needs_the_bearer_scheme(document: dict[str, Any]) -> None:
    """One security scheme, `bearerAuth` (HTTP bearer), required everywhere."""
    assert document["security"] == [{"bearerAuth": []}]
    schemes = document["components"]["securitySchemes"]
    assert list(schemes) == ["bearerAuth"]
    assert (schemes["bearerAuth"]["type"], schemes["bearerAuth"]["scheme"]) == ("http", "bearer")
    overrides = {
        name: operation(document, name)["security"]
        for name in OPERATIONS.values()
        if "security" in operation(document, name)
    }
    assert all(value == [{"bearerAuth": []}] for value in overrides.values()), overrides


@pytest.mark.anyio
async def test_only_get_pet_is_deprecated(document: dict[str, Any]) -> None:
    """getPet is `deprecated: true`; listPets and createPet are not deprecated."""
    assert {
        name: operation(document, name).get("deprecated", False) for name in OPERATIONS.values()
    } == {"listPets": False, "createPet": False, "getPet": True}


@pytest.mark.anyio
async def test_info_version_is_1_0_0(document: dict[str, Any]) -> None:
    """The interface description carries the version number 1.0.0."""
    assert document["info"]["version"] == "1.0.0"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("settings", "url"),
    [
        pytest.param(Settings(api_keys=(KEY,)), "/v1", id="no-root-path"),
        pytest.param(Settings(api_keys=(KEY,), root_path="/api"), "/api/v1", id="root-path"),
    ],
)
async def test_servers_url_is_the_version_segment_under_the_root_path(
    document: dict[str, Any], url: str
) -> None:
    """`servers` is `/v1`, with the configured root path in front of it."""
    assert document["servers"] == [{"url": url}]


@pytest.mark.anyio
async def test_error_schema_lists_exactly_the_contract_s_codes(document: dict[str, Any]) -> None:
    """The Error schema: code (the contract's codes), message, status; all required."""
    error = resolve(document, document["components"]["schemas"]["Error"])
    code = resolve(document, error["properties"]["code"])
    assert len(code["enum"]) == len(ERROR_CODES)
    assert set(code["enum"]) == ERROR_CODES
    assert error["properties"]["message"]["type"] == "string"
    assert error["properties"]["status"]["type"] == "integer"
    assert sorted(error["required"]) == ["code", "message", "status"]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("operation_id", "statuses"),
    [
        # 503: the database store's outage, for reads too
        ("listPets", {"200", "400", "401", "503"}),
        ("createPet", {"201", "400", "401", "409", "413", "415", "422", "503"}),
        ("getPet", {"200", "400", "401", "404", "503"}),
    ],
)
async def test_operation_lists_every_status_the_contract_names(
    document: dict[str, Any], operation_id: str, statuses: set[str]
) -> None:
    """Each status the contract names for an operation is a documented response."""
    responses = operation(document, operation_id)["responses"]
    assert statuses <= set(responses), sorted(responses)


@pytest.mark.anyio
async def test_every_error_response_is_exactly_the_one_error_schema(
    document: dict[str, Any],
) -> None:
    """Each non-2xx response refers to Error itself (no allOf): generated clients get one type."""
    schemas = {
        (name, status): response["content"]["application/json"]["schema"]
        for name in OPERATIONS.values()
        for status, response in operation(document, name)["responses"].items()
        if not status.startswith("2")
    }
    assert schemas == {key: {"$ref": "#/components/schemas/Error"} for key in schemas}


def walk(node: Any, path: str = "$") -> list[tuple[str, Any]]:
    """Every (path, node) of a JSON document, the root first."""
    found = [(path, node)]
    if isinstance(node, dict):
        for key, value in node.items():
            found += walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for number, value in enumerate(node):
            found += walk(value, f"{path}[{number}]")
    return found


@pytest.mark.anyio
async def test_every_enumeration_says_type_string(document: dict[str, Any]) -> None:
    """PetStatus and ErrorCode (every `enum` of strings) carry `type: string`."""
    enums = {
        path: node.get("type")
        for path, node in walk(document)
        if isinstance(node, dict) and isinstance(node.get("enum"), list)
    }
    assert enums
    assert enums == dict.fromkeys(enums, "string")


# Words of the implementation that have no place in what a generated client shows its users.
IMPLEMENTATION_WORDS = (
    "gc=",
    "msgspec",
    "Struct",
    "cycle collector",
    "bisect",
    "Python",
    "the log",
    "journal",
    "database",
)


@pytest.mark.anyio
async def test_no_description_carries_implementation_notes(document: dict[str, Any]) -> None:
    """Descriptions speak of the interface, never of how it is built."""
    leaks = {
        path: node
        for path, node in walk(document)
        if path.endswith(".description") and any(word in node for word in IMPLEMENTATION_WORDS)
    }
    assert leaks == {}


@pytest.mark.parametrize("which", ["api", "api-with-plane", "admin"])
def test_every_description_is_one_line(which: str) -> None:
    """No description of either document carries a docstring's line breaks and indentation."""
    # The fault rule's did, shown as such by Swagger UI and generated clients.
    described = (
        admin_openapi_document("")
        if which == "admin"
        else openapi_document("", plane=which == "api-with-plane")
    )
    broken = {
        path: node
        for path, node in walk(described)
        if path.endswith(".description") and (node != " ".join(node.split()))
    }
    assert broken == {}


@pytest.mark.anyio
async def test_every_operation_and_parameter_has_a_description(document: dict[str, Any]) -> None:
    """Operations and their parameters are described, for the docs page and generated clients."""
    missing = [
        f"{name} {parameter.get('name', '')}".strip()
        for name in OPERATIONS.values()
        for parameter in [{}, *operation(document, name).get("parameters", [])]
        if not (parameter or operation(document, name)).get("description")
    ]
    assert missing == []


@pytest.mark.anyio
async def test_info_license_is_the_license_file_s(document: dict[str, Any]) -> None:
    """info.license names MIT, the license of the LICENSE file."""
    assert document["info"]["license"] == {"name": "MIT", "identifier": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")


def response_headers(document: dict[str, Any], response: dict[str, Any]) -> dict[str, bool]:
    """A response's header names, each with whether it is `required`."""
    return {
        name: bool(resolve(document, header).get("required", False))
        for name, header in response.get("headers", {}).items()
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("operation_id", "status", "headers"),
    [
        ("createPet", "201", {"Location": True, "Idempotent-Replayed": False}),
        # Absent on the last page, so not required.
        ("listPets", "200", {"Link": False}),
        ("listPets", "401", {"WWW-Authenticate": True}),
        ("createPet", "401", {"WWW-Authenticate": True}),
        ("getPet", "401", {"WWW-Authenticate": True}),
    ],
)
async def test_response_documents_the_contract_headers(
    document: dict[str, Any], operation_id: str, status: str, headers: dict[str, bool]
) -> None:
    """Location and Idempotent-Replayed on 201, Link on listPets' 200, WWW-Authenticate on 401s."""
    response = operation(document, operation_id)["responses"][status]
    documented = response_headers(document, response)
    assert {name: documented.get(name) for name in headers} == headers


@pytest.mark.anyio
async def test_create_takes_an_optional_idempotency_key_header(document: dict[str, Any]) -> None:
    """createPet describes its optional Idempotency-Key: 1 to 255 visible ASCII, bare or quoted."""
    [key] = operation(document, "createPet")["parameters"]
    assert (key["name"], key["in"], key["required"]) == ("Idempotency-Key", "header", False)
    assert key["schema"]["type"] == "string"
    assert key["description"]
    pattern = re.compile(key["schema"]["pattern"])
    accepted = ["a", "abc", '"abc"', "x" * 255, '"a\\"b"']
    refused = ["", "x" * 256, "a b", "caf\u00e9"]
    assert [value for value in accepted if not pattern.search(value)] == []
    assert [value for value in refused if pattern.search(value)] == []


ADMIN_OPERATIONS = {
    ("/reset", "post"),
    ("/requests", "get"),
    ("/requests", "delete"),
    ("/faults", "post"),
    ("/faults", "get"),
    ("/faults", "delete"),
    ("/faults/{ruleId}", "delete"),
    ("/tenants", "post"),
    ("/tenants", "get"),
    ("/tenants/{tenantId}", "get"),
    ("/tenants/{tenantId}", "delete"),
    ("/tenants/{tenantId}/reset", "post"),
    ("/tenants/{tenantId}/requests", "get"),
    ("/tenants/{tenantId}/requests", "delete"),
    ("/tenants/{tenantId}/faults", "post"),
    ("/tenants/{tenantId}/faults", "get"),
    ("/tenants/{tenantId}/faults", "delete"),
    ("/tenants/{tenantId}/faults/{ruleId}", "delete"),
}


def test_control_plane_document_holds_the_plane_s_paths() -> None:
    """The plane's document holds its paths, each operation with an id of its own."""
    described = admin_openapi_document("")
    found = {(path, method) for path, item in described["paths"].items() for method in item}
    assert found == set(ADMIN_OPERATIONS)
    ids = [op["operationId"] for item in described["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_journal_filters_are_documented_with_their_bounds() -> None:
    """GET /_admin/requests takes method, path, status (100..599), limit (1 and up), atLeast
    (1..1000) and waitMs (0..60000)."""
    described = admin_openapi_document("")
    parameters = {
        p["name"]: p["schema"] for p in described["paths"]["/requests"]["get"]["parameters"]
    }
    assert parameters.keys() == {"method", "path", "status", "limit", "atLeast", "waitMs"}
    assert (parameters["status"]["minimum"], parameters["status"]["maximum"]) == (100, 599)
    assert parameters["limit"]["minimum"] == 1
    assert (parameters["atLeast"]["minimum"], parameters["atLeast"]["maximum"]) == (1, 1000)
    assert (parameters["waitMs"]["minimum"], parameters["waitMs"]["maximum"]) == (0, 60000)


@pytest.mark.anyio
async def test_every_response_of_both_documents_has_a_request_id(
    document: dict[str, Any],
) -> None:
    """Each response of each operation, in both documents, says it carries X-Request-Id."""
    for described in (document, admin_openapi_document("")):
        missing = [
            f"{operation_['operationId']} {status}"
            for operations in described["paths"].values()
            for operation_ in operations.values()
            for status, response in operation_["responses"].items()
            if response_headers(described, response).get("X-Request-Id") is not True
        ]
        assert missing == []


def test_every_control_plane_operation_lists_its_401_and_500() -> None:
    """Each control-plane operation lists its 401 and its 500, with the Error body."""
    # The admin key refused, and the last-resort 500, can answer any of the plane's operations.
    described = admin_openapi_document("")
    missing = [
        f"{found['operationId']} {status}"
        for operations in described["paths"].values()
        for found in operations.values()
        for status in ("401", "500")
        if status not in found["responses"]
    ]
    assert missing == []


@pytest.mark.anyio
async def test_every_get_pet_response_documents_the_deprecation_headers(
    document: dict[str, Any],
) -> None:
    """Deprecation, Sunset and Link are required headers of every getPet response."""
    responses = operation(document, "getPet")["responses"]
    missing = {
        status: DEPRECATION_HEADERS - {n for n, req in response_headers(document, r).items() if req}
        for status, r in responses.items()
    }
    assert missing == {status: set() for status in responses}


@pytest.mark.anyio
async def test_list_parameters_carry_the_limits(document: dict[str, Any]) -> None:
    """limit: optional integer 1..100, default 20; status: optional, one of the three values."""
    parameters = {p["name"]: p for p in operation(document, "listPets")["parameters"]}
    limit = parameters["limit"]
    assert (limit["in"], limit.get("required", False)) == ("query", False)
    assert {key: limit["schema"].get(key) for key in ("type", "minimum", "maximum", "default")} == {
        "type": "integer",
        "minimum": 1,
        "maximum": 100,
        "default": 20,
    }
    status = parameters["status"]
    assert (status["in"], status.get("required", False)) == ("query", False)
    assert resolve(document, status["schema"])["enum"] == ["available", "pending", "sold"]


@pytest.mark.anyio
async def test_create_body_is_a_required_json_new_pet(document: dict[str, Any]) -> None:
    """createPet takes a required JSON NewPet: name and categoryId required, no id, nothing else."""
    body = operation(document, "createPet")["requestBody"]
    assert body["required"] is True
    assert list(body["content"]) == ["application/json"]
    new_pet = resolve(document, body["content"]["application/json"]["schema"])
    assert sorted(new_pet["properties"]) == ["categoryId", "name", "status"]
    assert sorted(new_pet["required"]) == ["categoryId", "name"]
    assert new_pet["additionalProperties"] is False
    assert new_pet["properties"]["categoryId"]["format"] == "int64"


@pytest.mark.anyio
async def test_get_pet_path_parameter_is_a_required_int64(document: dict[str, Any]) -> None:
    """petId: a required path parameter, integer int64."""
    [pet_id] = operation(document, "getPet")["parameters"]
    assert (pet_id["name"], pet_id["in"], pet_id["required"]) == ("petId", "path", True)
    assert (pet_id["schema"]["type"], pet_id["schema"]["format"]) == ("integer", "int64")


# Warnings fail the run: a run whose every request got 401 (a wrong key) would pass every check.
# All but missing_test_data: a tenant's paths take an id made at run time, so a generated one is
# a 404 (the stateful phase follows created tenants).
SCHEMATHESIS_CONFIG = """\
[warnings]
fail-on = ["missing_auth", "base_url_mismatch", "validation_mismatch", "missing_deserializer",
  "unused_openapi_auth", "unsupported_regex", "method_not_allowed",
  "unresolvable_reference", "low_valid_rate", "rate_limited", "timeout_units"]

# A valid create can still be refused for the state it meets: an Idempotency-Key that an
# earlier generated request used with another body is a 422 (Idempotent creates).
[checks.positive_data_acceptance]
expected-statuses = ["2XX", "3XX", "401", "403", "404", "409", "422", "429", "5XX"]

# A tenant's seed must give its ids in increasing order, which JSON Schema can't say.
[[operations]]
include-operation-id = "createTenant"
checks.positive_data_acceptance.expected-statuses = ["201", "400", "401", "409"]

# A wait for requests that never come would outlast the request timeout.
[[operations]]
include-operation-id = ["listRequests", "listTenantRequests"]
parameters = { "query.waitMs" = 0 }
"""


@pytest.mark.parametrize(
    ("document_path", "key", "store"),
    [
        pytest.param("/v1/openapi.json", KEY, "memory", id="interface"),
        pytest.param("/_admin/openapi.json", ADMIN_KEY, "memory", id="control-plane"),
        pytest.param("/v1/openapi.json", KEY, "database", id="interface-over-postgresql"),
    ],
)
def test_schemathesis_finds_no_failure_in_the_live_service(
    start_server: ServerFactory,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    *,
    document_path: str,
    key: str,
    store: str,
) -> None:
    """schemathesis, every check and phase, finds no failure in a real process's own document."""
    # Against a real process and its own document: the interface over the memory store and over the
    # database store, and the control plane.
    database = (
        ["--database", request.getfixturevalue("database_url")] if store == "database" else []
    )
    server = start_server("--admin-key", ADMIN_KEY, *database)
    config = tmp_path / "schemathesis.toml"
    config.write_text(SCHEMATHESIS_CONFIG)
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PETSTORE_", "SCHEMATHESIS_", "HYPOTHESIS_"))
    }
    environment |= {"NO_COLOR": "1", "NO_PROXY": "127.0.0.1,localhost"}
    argv = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(config),
        "run",
        f"{server.base_url}{document_path}",
        "--header",
        f"Authorization: Bearer {key}",
        "--checks",
        "all",
        # Emptying a tenant's rules or journal (DELETE /_admin/tenants/{id}/faults) leaves the
        # list there, empty, which this check takes for a deleted resource still served. A
        # deleted tenant's 404s have tests of their own (test_tenants.py); /v1 deletes nothing.
        "--exclude-checks",
        "use_after_free",
        "--mode",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        "50",
        "--seed",
        "20301205",
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--request-timeout",
        "5",
    ]
    # cwd: schemathesis and hypothesis write their caches (.schemathesis, .hypothesis) there.
    result = subprocess.run(
        argv, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=80, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert server.process.poll() is None, server.stderr
    assert server.stop() in (0, -15)
    assert "Traceback" not in server.stderr, server.stderr


def test_a_generated_client_parses_every_error_into_one_error_class(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    """A client generated from the served document parses every error into one Error class."""
    # openapi-python-client builds the client; its 404, 400 and 401 all parse into the same Error
    # class, and its createPet gives a Pet. With the test-control plane on, so do the faults it
    # injects (a 429, 502 or 504 raised UnexpectedStatus: the document did not list them).
    server = start_server("--admin-key", "admin-key-0123456789")
    document = tmp_path / "openapi.json"
    document.write_bytes(httpx.get(f"{server.base_url}/v1/openapi.json").content)
    config = tmp_path / "generator.yaml"
    config.write_text("post_hooks: []\n")  # no formatting pass: only the code matters here
    generate = subprocess.run(
        [
            str(Path(sys.executable).parent / "openapi-python-client"),
            "generate",
            "--path",
            str(document),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / "generated_client"),
            "--config",
            str(config),
            "--fail-on-warning",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert generate.returncode == 0, generate.stdout + generate.stderr
    check = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
from generated_client import AuthenticatedClient, Client
from generated_client.api.animals import create_pet, get_pet, list_pets
from generated_client.models import Error, ErrorCode, NewPet, Pet

base = {server.base_url + "/v1"!r}
keyed, keyless = AuthenticatedClient(base_url=base, token={KEY!r}), Client(base_url=base)
answers = {{
    404: get_pet.sync_detailed(pet_id=999, client=keyed),
    400: list_pets.sync_detailed(client=keyed, limit=0),
    401: list_pets.sync_detailed(client=keyless),
}}
for code in (429, 500, 502, 503, 504):
    prefer = {{"Prefer": f"code={{code}}"}}
    injecting = AuthenticatedClient(base_url=base, token={KEY!r}, headers=prefer)
    answers[code] = get_pet.sync_detailed(pet_id=1, client=injecting)
for status, answer in answers.items():
    assert int(answer.status_code) == status, answer
    assert type(answer.parsed) is Error, type(answer.parsed)
codes = [answer.parsed.code for answer in answers.values()]
assert codes == [ErrorCode.NOT_FOUND, ErrorCode.VALIDATION_ERROR, ErrorCode.UNAUTHORIZED] + [
    ErrorCode.INJECTED_FAULT
] * 5, codes
created = create_pet.sync_detailed(client=keyed, body=NewPet(name="Rex", category_id=1))
assert int(created.status_code) == 201 and isinstance(created.parsed, Pet), created
print("one Error class:", Error.__module__)
"""
    # In a process of its own: the generated package is imported fresh, outside this suite.
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "one Error class: generated_client.models.error\n"


def test_with_the_plane_on_every_operation_documents_the_faults_it_injects() -> None:
    """Only with the plane on does every operation document the faults it injects."""
    # 429, 502 and 504, and `injected_fault` among the 500's and 503's codes, Retry-After on the 429
    # and the 503, on every operation, only when an admin key opens the plane.
    on, off = openapi_document("", plane=True), openapi_document("", plane=False)
    validate(on, cls=OpenAPIV31SpecValidator)
    for path, method in OPERATIONS:
        responses = on["paths"][path][method]["responses"]
        assert {"429", "502", "504"} <= responses.keys()
        assert not {"429", "502", "504"} & off["paths"][path][method]["responses"].keys()
        for status in ("429", "500", "502", "503", "504"):
            assert "`injected_fault`" in responses[status]["description"]
            assert "X-Request-Id" in responses[status]["headers"]
        assert {"Retry-After"} <= responses["429"]["headers"].keys() & responses["503"][
            "headers"
        ].keys()
