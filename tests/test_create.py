"""createPet: the 201 with its Location, and every way a body is turned down."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app import Petstore
from schemas import Pet
from settings import Settings
from store import MemoryStore
from tests.conftest import KEY, assert_error

pytestmark = pytest.mark.anyio

JSON = "application/json"
SMALL_BODY = Settings(api_keys=(KEY,), max_body=64)
REX = {"name": "Rex", "categoryId": 1, "status": "available"}


async def post_raw(
    client: httpx.AsyncClient, body: bytes, content_type: str | None = JSON
) -> httpx.Response:
    headers = {} if content_type is None else {"Content-Type": content_type}
    return await client.post("/v1/pets", content=body, headers=headers)


async def list_all(client: httpx.AsyncClient) -> Any:
    response = await client.get("/v1/pets", params={"limit": 100})
    assert response.status_code == 200
    return response.json()


@pytest.mark.parametrize(
    "new_pet",
    [
        {"name": "Rex", "categoryId": 1, "status": "available"},
        {"name": "Tom", "categoryId": 7, "status": "pending"},
        {"name": "Polly", "categoryId": 0, "status": "sold"},
        {"name": "Nemo", "categoryId": -5},
        {"status": "sold", "categoryId": 3, "name": "Ünïcødé 🐕"},
        {"name": "x" * 1000, "categoryId": 2},
    ],
)
async def test_create_is_201_with_pet_and_location(
    client: httpx.AsyncClient, new_pet: dict[str, Any]
) -> None:
    """A valid NewPet is stored: 201, the Pet with id 1, and Location /v1/pets/1."""
    response = await client.post("/v1/pets", json=new_pet)
    assert response.status_code == 201
    assert response.headers["content-type"] == JSON
    assert response.headers["location"] == "/v1/pets/1"
    assert response.json() == {"id": 1, **new_pet}
    assert "deprecation" not in response.headers


async def test_a_key_given_twice_is_checked_each_time_and_the_last_wins(
    client: httpx.AsyncClient,
) -> None:
    """Of a JSON key given twice, the last value wins."""
    last = await post_raw(client, b'{"name": "Ann", "name": "Rex", "categoryId": 1}')
    assert (last.status_code, last.json()) == (201, {"id": 1, "name": "Rex", "categoryId": 1})
    assert await list_all(client) == [{"id": 1, "name": "Rex", "categoryId": 1}]


async def test_ids_are_assigned_1_2_3_in_increasing_order(client: httpx.AsyncClient) -> None:
    """Successive creates get ids 1, 2, 3 and matching Locations."""
    for expected_id, name in enumerate(["Rex", "Tom", "Polly"], 1):
        response = await client.post("/v1/pets", json={"name": name, "categoryId": 1})
        assert response.status_code == 201
        assert response.json() == {"id": expected_id, "name": name, "categoryId": 1}
        assert response.headers["location"] == f"/v1/pets/{expected_id}"
    assert await list_all(client) == [
        {"id": 1, "name": "Rex", "categoryId": 1},
        {"id": 2, "name": "Tom", "categoryId": 1},
        {"id": 3, "name": "Polly", "categoryId": 1},
    ]


async def test_location_leads_to_the_created_pet(client: httpx.AsyncClient) -> None:
    """GET on the Location answers the same Pet as the 201."""
    created = await client.post("/v1/pets", json=REX)
    fetched = await client.get(created.headers["location"])
    assert fetched.status_code == 200
    assert fetched.json() == created.json() == {"id": 1, **REX}


async def test_omitted_status_stays_omitted_everywhere(client: httpx.AsyncClient) -> None:
    """A pet created without status has no status key in createPet, getPet or listPets."""
    created = await client.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
    assert created.status_code == 201
    assert created.json() == {"id": 1, "name": "Rex", "categoryId": 1}
    fetched = await client.get("/v1/pets/1")
    assert fetched.status_code == 200
    assert fetched.json() == {"id": 1, "name": "Rex", "categoryId": 1}
    assert await list_all(client) == [{"id": 1, "name": "Rex", "categoryId": 1}]


@pytest.mark.parametrize("status", ["available", "pending", "sold"])
async def test_pet_without_status_matches_no_status_filter(
    client: httpx.AsyncClient, status: str
) -> None:
    """A pet created without status is listed unfiltered but by no status filter."""
    await client.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
    await client.post("/v1/pets", json={"name": "Tom", "categoryId": 1, "status": status})
    response = await client.get("/v1/pets", params={"status": status})
    assert response.status_code == 200
    assert response.json() == [{"id": 2, "name": "Tom", "categoryId": 1, "status": status}]


@pytest.mark.parametrize(
    ("literal", "expected"),
    [
        ("1.0", 1),
        ("-0.0", 0),
        ("0.0", 0),
        ("1e2", 100),
        ("2.5e1", 25),
        ("-3.00", -3),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("-9.223372036854775808e18", -(2**63)),
        # A zero with an exponent past what a Decimal holds is still zero.
        ("0e99999999999999999999", 0),
        ("-0e99999999999999999999", 0),
        ("0.00E+99999999999999999999", 0),
        ("0e-99999999999999999999", 0),
    ],
)
async def test_integral_number_is_accepted_as_that_integer(
    client: httpx.AsyncClient, literal: str, expected: int
) -> None:
    """A categoryId with a zero fraction (1.0, -0.0, 1e2) and the int64 bounds are integers."""
    body = b'{"name": "Rex", "categoryId": ' + literal.encode() + b"}"
    response = await post_raw(client, body)
    assert response.status_code == 201
    assert response.json() == {"id": 1, "name": "Rex", "categoryId": expected}
    assert type(response.json()["categoryId"]) is int  # 1, not 1.0
    fetched = (await client.get("/v1/pets/1")).json()
    assert fetched == {"id": 1, "name": "Rex", "categoryId": expected}
    assert type(fetched["categoryId"]) is int


INVALID_BODIES = [
    # Not JSON at all: malformed_json.
    pytest.param(b'{"name": "Rex", "categoryId": 1', "malformed_json", "", id="truncated-object"),
    pytest.param(b'{"name": "Re', "malformed_json", "", id="truncated-string"),
    pytest.param(b'{"name": "Rex", "categoryId": 1}x', "malformed_json", "", id="trailing-garbage"),
    pytest.param(b'{"name": "Rex", "categoryId": 1}{}', "malformed_json", "", id="two-objects"),
    pytest.param(b'{"name": "Rex", "categoryId": NaN}', "malformed_json", "", id="NaN"),
    pytest.param(b'{"name": "Rex", "categoryId": Infinity}', "malformed_json", "", id="Infinity"),
    pytest.param(b'{"name": "Rex", "categoryId": -Infinity}', "malformed_json", "", id="-Infinity"),
    pytest.param(b"NaN", "malformed_json", "", id="bare-NaN"),
    pytest.param(
        b'{"name": "R\xffx", "categoryId": 1}', "malformed_json", "", id="bad-utf8-in-str"
    ),
    pytest.param(
        b'{"name": "Rex",\xff "categoryId": 1}', "malformed_json", "", id="bad-utf8-outside"
    ),
    pytest.param(
        b'{"n\xe4me": "Rex", "categoryId": 1}', "malformed_json", "", id="bad-utf8-in-key"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": "sold\xc3"}',
        "malformed_json",
        "",
        id="truncated-utf8-sequence",
    ),
    pytest.param(
        b'{"name": "\xed\xa0\x80", "categoryId": 1}', "malformed_json", "", id="utf8-surrogate"
    ),
    pytest.param(
        b'{"name": "\xc0\xaf", "categoryId": 1}', "malformed_json", "", id="overlong-utf8"
    ),
    pytest.param(
        b'\xef\xbb\xbf{"name": "Rex", "categoryId": 1}', "malformed_json", "", id="utf8-bom"
    ),
    pytest.param(
        '{"name": "Rex", "categoryId": 1}'.encode("utf-16"), "malformed_json", "", id="utf16"
    ),
    pytest.param(b"", "malformed_json", "Body is not JSON: it is empty", id="empty"),
    pytest.param(b"  \r\n\t", "malformed_json", "it is only whitespace", id="whitespace-only"),
    pytest.param(b"{'name': 'Rex', 'categoryId': 1}", "malformed_json", "", id="single-quotes"),
    pytest.param(b'{"name": "Rex", /* c */ "categoryId": 1}', "malformed_json", "", id="comment"),
    pytest.param(
        b'// c\n{"name": "Rex", "categoryId": 1}', "malformed_json", "", id="line-comment"
    ),
    pytest.param(b'{"name": "Rex", "categoryId": 1,}', "malformed_json", "", id="trailing-comma"),
    pytest.param(b'{name: "Rex", categoryId: 1}', "malformed_json", "", id="unquoted-keys"),
    pytest.param(
        b'{"name": "R\nx", "categoryId": 1}', "malformed_json", "", id="raw-newline-in-str"
    ),
    pytest.param(b'{"name": "Rex", "categoryId": 0x1}', "malformed_json", "", id="hex-number"),
    pytest.param(b'{"name": "Rex", "categoryId": 01}', "malformed_json", "", id="leading-zero"),
    pytest.param(b'{"name": "Rex", "categoryId": +1}', "malformed_json", "", id="plus-sign"),
    pytest.param(b'{"name": "Rex", "categoryId": .5}', "malformed_json", "", id="no-int-part"),
    pytest.param(b'{"name": "Rex", "categoryId": 1.}', "malformed_json", "", id="no-fraction"),
    pytest.param(b"name=Rex&categoryId=1", "malformed_json", "", id="form-encoded"),
    # JSON, but not a NewPet: validation_error, the message naming the field.
    pytest.param(b'{"categoryId": 1}', "validation_error", "`name`", id="missing-name"),
    pytest.param(b'{"name": "Rex"}', "validation_error", "`categoryId`", id="missing-categoryId"),
    pytest.param(b"{}", "validation_error", "required field", id="empty-object"),
    pytest.param(b'{"name": null, "categoryId": 1}', "validation_error", "$.name", id="null-name"),
    pytest.param(
        b'{"name": "Rex", "categoryId": null}', "validation_error", "$.categoryId", id="null-cat"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": null}',
        "validation_error",
        "$.status",
        id="null-status",
    ),
    pytest.param(b'{"name": 1, "categoryId": 1}', "validation_error", "$.name", id="name-int"),
    pytest.param(b'{"name": true, "categoryId": 1}', "validation_error", "$.name", id="name-bool"),
    pytest.param(b'{"name": ["R"], "categoryId": 1}', "validation_error", "$.name", id="name-list"),
    pytest.param(b'{"name": {}, "categoryId": 1}', "validation_error", "$.name", id="name-object"),
    pytest.param(b'{"name": "", "categoryId": 1}', "validation_error", "$.name", id="name-empty"),
    pytest.param(
        b'{"name": "Rex", "categoryId": "1"}', "validation_error", "$.categoryId", id="cat-string"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": true}', "validation_error", "$.categoryId", id="cat-true"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": false}', "validation_error", "$.categoryId", id="cat-false"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1.5}', "validation_error", "$.categoryId", id="cat-1.5"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 9223372036854775808}',
        "validation_error",
        "$.categoryId",
        id="cat-2**63",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": -9223372036854775809}',
        "validation_error",
        "$.categoryId",
        id="cat--2**63-1",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 99999999999999999999999999999999}',
        "validation_error",
        "$.categoryId",
        id="cat-huge-int",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1e19}', "validation_error", "$.categoryId", id="cat-1e19"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1e400}', "validation_error", "$.categoryId", id="cat-1e400"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": -1e400}',
        "validation_error",
        "$.categoryId",
        id="cat--1e400",
    ),
    # Exponents past what a Decimal holds (its constructor raises InvalidOperation).
    pytest.param(
        b'{"name": "Rex", "categoryId": 1e99999999999999999999}',
        "validation_error",
        "$.categoryId",
        id="cat-1e(20 digits)",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": -1e99999999999999999999}',
        "validation_error",
        "$.categoryId",
        id="cat--1e(20 digits)",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1e-99999999999999999999}',
        "validation_error",
        "$.categoryId",
        id="cat-1e-(20 digits)",
    ),
    pytest.param(
        b'{"categoryId": 1e99999999999999999999} x', "malformed_json", "", id="huge-then-garbage"
    ),
    # 4,301 digits: JSON, though Python makes no int of that many (msgspec says "out of range").
    pytest.param(
        b'{"name": "Rex", "categoryId": 1%s}' % (b"0" * 4300),
        "validation_error",
        "A number is out of range",
        id="cat-4301-digits",
    ),
    # A number past what can be made, wherever it is, is refused as out of range.
    pytest.param(
        b'{"name": 1%s}' % (b"0" * 4300),
        "validation_error",
        "A number is out of range",
        id="name-4301",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": 1e99999999999999999999}',
        "validation_error",
        "$.status: expected a string, got a number",
        id="status-1e(20 digits)",
    ),
    pytest.param(b"1%s" % (b"0" * 4300), "validation_error", "A number is out of range", id="4301"),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1%s,}' % (b"0" * 4300),
        "malformed_json",
        "trailing comma",
        id="4301-digits-then-bad-syntax",
    ),
    pytest.param(
        b'{"categoryId": 1%s, "name": "\xff"}' % (b"0" * 4300),
        "malformed_json",
        "UTF-8",
        id="4301-digits-then-bad-utf8",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": [1]}', "validation_error", "$.categoryId", id="cat-list"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": {}}', "validation_error", "$.categoryId", id="cat-object"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": "Available"}',
        "validation_error",
        "$.status",
        id="status-wrong-case",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": ""}',
        "validation_error",
        "$.status",
        id="status-empty",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": 1}',
        "validation_error",
        "$.status",
        id="status-int",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": "unknown"}',
        "validation_error",
        "$.status",
        id="status-unknown",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": " sold"}',
        "validation_error",
        "$.status",
        id="status-padded",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "status": ["sold"]}',
        "validation_error",
        "$.status",
        id="status-list",
    ),
    pytest.param(b"[]", "validation_error", "object", id="body-empty-array"),
    pytest.param(
        b'[{"name": "Rex", "categoryId": 1}]', "validation_error", "object", id="body-array"
    ),
    pytest.param(b'"Rex"', "validation_error", "object", id="body-string"),
    pytest.param(b"1", "validation_error", "object", id="body-number"),
    pytest.param(b"null", "validation_error", "object", id="body-null"),
    pytest.param(b"true", "validation_error", "object", id="body-true"),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "color": "brown"}',
        "validation_error",
        "`color`",
        id="unknown-field",
    ),
    pytest.param(
        b'{"id": 7, "name": "Rex", "categoryId": 1}', "validation_error", "`id`", id="id-field"
    ),
    # Not JSON at all, though a decoder that checks types as it parses meets a wrong type, an
    # unknown or missing field, or a broken constraint before the syntax error: malformed_json.
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "x": "\xff"}',
        "malformed_json",
        "UTF-8",
        id="unknown-field-bad-utf8-value",
    ),
    pytest.param(b"[1,2,", "malformed_json", "truncated", id="truncated-array"),
    pytest.param(b"[1,]", "malformed_json", "trailing comma", id="array-trailing-comma"),
    pytest.param(b"[]]", "malformed_json", "trailing", id="array-extra-bracket"),
    pytest.param(b"[NaN]", "malformed_json", "", id="NaN-in-array"),
    pytest.param(b'["\xff"]', "malformed_json", "UTF-8", id="bad-utf8-in-array"),
    pytest.param(b"123abc", "malformed_json", "trailing", id="number-then-garbage"),
    pytest.param(b"1 2", "malformed_json", "trailing", id="two-numbers"),
    pytest.param(b"{}x", "malformed_json", "trailing", id="missing-fields-then-garbage"),
    pytest.param(b'{"id": 7} x', "malformed_json", "trailing", id="unknown-field-then-garbage"),
    pytest.param(b'{"name": null', "malformed_json", "truncated", id="null-then-truncated"),
    pytest.param(
        b'{"name": "", "categoryId": 1', "malformed_json", "truncated", id="empty-name-truncated"
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": "1",', "malformed_json", "", id="cat-string-truncated"
    ),
    pytest.param(b'{"name": [1,', "malformed_json", "truncated", id="name-list-truncated"),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1, "color":', "malformed_json", "", id="unknown-truncated"
    ),
    pytest.param(b"[" * 100_000, "malformed_json", "nested too deeply", id="deep-array-open"),
    pytest.param(
        b'{"name": "Rex", "categoryId": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "malformed_json",
        "nested too deeply",
        id="cat-nested-too-deeply",
    ),
]


@pytest.mark.parametrize(("body", "code", "needle"), INVALID_BODIES)
async def test_invalid_body_is_400_and_stores_nothing(
    client: httpx.AsyncClient, body: bytes, code: str, needle: str
) -> None:
    """A body that is not JSON is malformed_json, one that is not a NewPet validation_error."""
    first = await client.post("/v1/pets", json=REX)
    assert first.status_code == 201
    response = await post_raw(client, body)
    message = assert_error(response, 400, code)
    assert needle in message
    assert "location" not in response.headers
    assert await list_all(client) == [{"id": 1, **REX}]


@pytest.mark.parametrize(
    "literal",
    [
        pytest.param("1e-400", id="underflows-to-0"),
        pytest.param("1.0000000000000001", id="rounds-to-1"),
        pytest.param("9007199254740993.5", id="rounds-to-integral-float"),
    ],
)
async def test_fraction_lost_to_float_rounding_is_still_not_an_integer(
    client: httpx.AsyncClient, literal: str
) -> None:
    """A categoryId whose fraction is not zero is refused, even where a float would drop it."""
    response = await post_raw(client, b'{"name": "Rex", "categoryId": ' + literal.encode() + b"}")
    assert "$.categoryId" in assert_error(response, 400, "validation_error")
    assert await list_all(client) == []


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "application/json; charset=utf-16",
        "application/jsonx",
        "text/json",
        "",
    ],
)
async def test_content_type_other_than_json_is_415(
    client: httpx.AsyncClient, content_type: str | None
) -> None:
    """A body not declared as UTF-8 application/json is 415 unsupported_media_type."""
    response = await post_raw(client, json.dumps(REX).encode(), content_type)
    assert_error(response, 415, "unsupported_media_type")
    assert await list_all(client) == []


async def test_a_content_encoding_other_than_identity_is_415(client: httpx.AsyncClient) -> None:
    """A compressed body (Content-Encoding: gzip) is 415, nothing stored; `identity` is accepted."""
    # The compressed body is not read as if it were JSON; `identity` is the body as it is.
    body = json.dumps({"name": "Rex", "categoryId": 1}).encode()
    compressed = await client.post(
        "/v1/pets",
        content=gzip.compress(body),
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    message = assert_error(compressed, 415, "unsupported_media_type")
    assert message == "Content-Encoding 'gzip' is not supported: send the body as it is"
    assert await list_all(client) == []
    plain = await client.post(
        "/v1/pets", content=body, headers={"Content-Type": JSON, "Content-Encoding": "identity"}
    )
    assert plain.status_code == 201


async def test_several_content_encodings_are_one_list(client: httpx.AsyncClient) -> None:
    """Several Content-Encoding headers are one list: `gzip` then `identity` is a 415."""
    # RFC 9110 5.3. Were the last one read alone, it would be a 201, the gzip-declared body read as
    # JSON.
    body = json.dumps({"name": "Rex", "categoryId": 1}).encode()
    twice = [("Content-Type", JSON), ("Content-Encoding", "gzip"), ("Content-Encoding", "identity")]
    refused = await client.post("/v1/pets", content=body, headers=twice)
    message = assert_error(refused, 415, "unsupported_media_type")
    assert message == "Content-Encoding 'gzip,identity' is not supported: send the body as it is"
    assert await list_all(client) == []
    both_identity = [("Content-Type", JSON), ("Content-Encoding", "identity, IDENTITY")]
    assert (await client.post("/v1/pets", content=body, headers=both_identity)).status_code == 201


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        'application/json; charset="utf-8"',
        "Application/JSON",
        "APPLICATION/JSON; CHARSET=UTF-8",
    ],
)
async def test_json_content_type_variants_are_accepted(
    client: httpx.AsyncClient, content_type: str
) -> None:
    """application/json in any case, with a UTF-8 charset parameter, is accepted."""
    response = await post_raw(client, json.dumps(REX).encode(), content_type)
    assert response.status_code == 201
    assert response.json() == {"id": 1, **REX}


def body_of_size(size: int) -> bytes:
    """A valid NewPet body exactly `size` bytes long."""
    frame = b'{"name": "", "categoryId": 1}'
    return frame.replace(b'""', b'"' + b"x" * (size - len(frame)) + b'"')


async def chunks(body: bytes, read: list[int], size: int = 16) -> AsyncIterator[bytes]:
    """`body` in pieces, counting in `read` how many the service pulled."""
    for start in range(0, len(body), size):
        read.append(start)
        yield body[start : start + size]


@pytest.mark.parametrize("settings", [SMALL_BODY], ids=["max_body=64"])
async def test_body_exactly_at_the_limit_is_accepted(client: httpx.AsyncClient) -> None:
    """A body of exactly max_body bytes is stored."""
    body = body_of_size(64)
    assert len(body) == 64
    response = await post_raw(client, body)
    assert response.status_code == 201
    assert response.json() == {"id": 1, "name": "x" * 35, "categoryId": 1}


@pytest.mark.parametrize("settings", [SMALL_BODY], ids=["max_body=64"])
async def test_body_over_the_limit_with_content_length_is_413(client: httpx.AsyncClient) -> None:
    """A Content-Length over max_body is 413 payload_too_large."""
    response = await post_raw(client, body_of_size(65))
    assert_error(response, 413, "payload_too_large")
    assert await list_all(client) == []


@pytest.mark.parametrize("settings", [SMALL_BODY], ids=["max_body=64"])
async def test_declared_length_over_the_limit_is_413_before_reading(
    client: httpx.AsyncClient,
) -> None:
    """A Content-Length over max_body is answered at once, without reading the body."""
    read: list[int] = []
    body = body_of_size(4096)
    response = await client.post(
        "/v1/pets",
        content=chunks(body, read),
        headers={"Content-Type": JSON, "Content-Length": str(len(body))},
    )
    assert_error(response, 413, "payload_too_large")
    assert read == []
    assert await list_all(client) == []


@pytest.mark.parametrize("settings", [SMALL_BODY], ids=["max_body=64"])
async def test_streamed_body_over_the_limit_is_413_without_reading_it_all(
    client: httpx.AsyncClient,
) -> None:
    """A chunked body is cut off with 413 as soon as it passes max_body, not read to its end."""
    read: list[int] = []
    response = await client.post(
        "/v1/pets", content=chunks(body_of_size(4096), read), headers={"Content-Type": JSON}
    )
    assert_error(response, 413, "payload_too_large")
    assert response.headers["connection"] == "close"
    assert len(read) <= 64 // 16 + 1
    assert await list_all(client) == []


@pytest.mark.parametrize("settings", [SMALL_BODY], ids=["max_body=64"])
async def test_streamed_body_within_the_limit_is_accepted(client: httpx.AsyncClient) -> None:
    """A chunked body of max_body bytes is read whole and stored."""
    read: list[int] = []
    response = await client.post(
        "/v1/pets", content=chunks(body_of_size(64), read), headers={"Content-Type": JSON}
    )
    assert response.status_code == 201
    assert response.json() == {"id": 1, "name": "x" * 35, "categoryId": 1}


async def test_a_client_gone_mid_body_stores_nothing_and_is_not_answered(
    app: Petstore, store: MemoryStore
) -> None:
    """A create whose client disconnects before its body ends stores no pet and sends nothing."""
    headers = [(b"authorization", f"Bearer {KEY}".encode()), (b"content-type", JSON.encode())]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/pets",
        "query_string": b"",
        "headers": headers,
    }
    messages = iter([
        {"type": "http.request", "body": b'{"name": "Rex", ', "more_body": True},
        {"type": "http.disconnect"},
    ])  # fmt: skip
    sent: list[Any] = []

    async def receive() -> Any:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert sent == []
    assert store.count == 0


async def test_concurrent_creates_get_distinct_ids(client: httpx.AsyncClient) -> None:
    """Fifty creates at once get the ids 1..50, each once, and all are listed."""
    responses = await asyncio.gather(
        *(client.post("/v1/pets", json={"name": f"pet{n}", "categoryId": n}) for n in range(50))
    )
    assert [response.status_code for response in responses] == [201] * 50
    ids = sorted(response.json()["id"] for response in responses)
    assert ids == list(range(1, 51))
    for response in responses:
        pet = response.json()
        assert response.headers["location"] == f"/v1/pets/{pet['id']}"
    listed = await list_all(client)
    assert [pet["id"] for pet in listed] == list(range(1, 51))
    assert sorted(listed, key=lambda pet: pet["categoryId"]) == sorted(
        (response.json() for response in responses), key=lambda pet: pet["categoryId"]
    )


@pytest.mark.parametrize("store", [MemoryStore([Pet(id=2**63 - 1, name="Last", categoryId=1)])])
async def test_past_the_last_int64_id_a_create_is_a_503(client: httpx.AsyncClient) -> None:
    """In memory too: after id 2**63 - 1 (seeded), a create is a 503, and nothing is stored."""
    response = await client.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
    assert "9223372036854775807 is taken" in assert_error(response, 503, "storage_unavailable")
    assert [pet["id"] for pet in (await client.get("/v1/pets")).json()] == [2**63 - 1]


@pytest.mark.anyio
async def test_a_validation_message_speaks_json_the_field_first(client: httpx.AsyncClient) -> None:
    """A validation message names the JSON field first and speaks JSON."""
    # msgspec's "Expected `int`, got `str` - at `$.categoryId`" spoke Python to a client in any
    # language.
    answers = [
        await client.post("/v1/pets", json={"name": "Rex", "categoryId": "1"}),
        await client.post("/v1/pets", json={"name": "Rex", "categoryId": 1.5}),
        await client.post("/v1/pets", json={"name": "", "categoryId": 1}),
        await client.post("/v1/pets", json=[]),
        await client.post("/v1/pets", json={"name": "Rex", "categoryId": 1, "array": 1}),
    ]
    assert [assert_error(answer, 400, "validation_error") for answer in answers] == [
        "$.categoryId: expected an integer, got a string",
        "$.categoryId: expected an integer, got a number",
        "$.name: expected a string of length >= 1",
        "Expected an object, got an array",
        "Object contains unknown field `array`",  # a field's name is no type's
    ]
