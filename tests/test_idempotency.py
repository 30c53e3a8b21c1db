"""Idempotent createPet: Idempotency-Key replays the first 201, in memory and in the data file,
across restarts; 409 while in flight, 422 for another request, 400 for a malformed key."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import create_app
from filestore import DataFileError, FileStore
from schemas import IDEMPOTENCY_KEY_PATTERN, NewPet, Pet
from settings import Settings
from store import RETAIN_KEYS, RETAIN_SECONDS, IdempotencyKeys, MemoryStore, PetStore
from tests.conftest import AUTH, KEY, ServerFactory, assert_error, serving
from tests.test_control_plane import ADMIN, ADMIN_KEY, plane_app, running

pytestmark = pytest.mark.anyio

REX = {"name": "Rex", "categoryId": 1, "status": "available"}
TOM = {"name": "Tom", "categoryId": 2}


AUTHORIZATION = f"Bearer {KEY}".encode()


def keyed(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


async def all_pets(http: httpx.AsyncClient) -> Any:
    return (await http.get("/v1/pets", params={"limit": 100}, headers=AUTH)).json()


def line(pet: dict[str, Any]) -> bytes:
    """A Pet as the service writes it: compact JSON, one line."""
    return json.dumps(pet, separators=(",", ":")).encode() + b"\n"


async def poll(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Return once `condition()` holds; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.002)  # a poll interval; the loop checks the condition


def service(store: PetStore | None = None) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """An authenticated client of the app over `store` (in memory by default), two API keys."""
    settings = Settings(api_keys=(KEY, "second-key-0123"))
    return serving(create_app(settings, store or MemoryStore()))


def file_service(path: Path) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """An authenticated client of the app over a data file at `path`, closed at the end."""
    return service(FileStore(str(path)))


# --------------------------------------------------------------------------- the rules


async def test_same_key_and_request_replays_the_201() -> None:
    """A retry gets the same status, body and Location, says it is a replay, stores nothing new."""
    # The next create gets the next id.
    async with service() as http:
        first = await http.post("/v1/pets", json=REX, headers=keyed("order-1"))
        again = await http.post("/v1/pets", json=REX, headers=keyed("order-1"))
        other = await http.post("/v1/pets", json=TOM)
        assert (first.status_code, first.json()) == (201, {"id": 1, **REX})
        assert "idempotent-replayed" not in first.headers
        assert (again.status_code, again.content) == (201, first.content)
        assert again.headers["location"] == first.headers["location"] == "/v1/pets/1"
        assert again.headers["idempotent-replayed"] == "true"
        assert other.json()["id"] == 2
        assert await all_pets(http) == [{"id": 1, **REX}, {"id": 2, **TOM}]


@pytest.mark.parametrize(
    "same_request",
    [
        b'{"status": "available", "categoryId": 1, "name": "Rex"}',
        b'{ "name" : "Rex" ,\n "categoryId" : 1.0 , "status" : "available" }',
        b'{"name": "Rex", "categoryId": 1e0, "status": "available"}',
    ],
)
async def test_the_request_is_compared_decoded(same_request: bytes) -> None:
    """Key order, spacing and 1.0 against 1 do not make another request."""
    async with service() as http:
        await http.post("/v1/pets", json=REX, headers=keyed("k"))
        again = await http.post(
            "/v1/pets",
            content=same_request,
            headers={**keyed("k"), "Content-Type": "application/json"},
        )
        assert (again.status_code, again.headers["idempotent-replayed"]) == (201, "true")
        assert len(await all_pets(http)) == 1


@pytest.mark.parametrize(
    "other_request",
    [
        {"name": "Rex", "categoryId": 1},  # status omitted is another request
        {"name": "Rex", "categoryId": 2, "status": "available"},
        {"name": "Rexx", "categoryId": 1, "status": "available"},
        {"name": "Rex", "categoryId": 1, "status": "sold"},
    ],
)
async def test_same_key_another_request_is_422(other_request: dict[str, Any]) -> None:
    """The key used with a different request: 422 idempotency_key_reused, nothing stored."""
    async with service() as http:
        await http.post("/v1/pets", json=REX, headers=keyed("k"))
        response = await http.post("/v1/pets", json=other_request, headers=keyed("k"))
        assert_error(response, 422, "idempotency_key_reused")
        assert await all_pets(http) == [{"id": 1, **REX}]


@pytest.mark.parametrize(
    ("bare", "other"),
    [
        ("abc-1", '"abc-1"'),
        ("abc-1", "abc-1 "),
        ("abc-1", '"abc-1"\t'),
        ('a"b\\c', '"a\\"b\\\\c"'),
    ],
    ids=["quoted", "a space after", "quoted, a tab after", "quoted-pairs"],
)
async def test_forms_of_one_key_are_the_same_key(bare: str, other: str) -> None:
    """Quoted and bare forms of a key, with whitespace after or quoted-pairs, name one key."""
    # `"abc"` and `abc` name one key, whitespace after a value is not part of it, and a quoted-pair
    # in a quoted key stands for its character (RFC 9110 5.5, 5.6.4).
    async with service() as http:
        await http.post("/v1/pets", json=REX, headers=keyed(bare))
        again = await http.post("/v1/pets", json=REX, headers=keyed(other))
        assert again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert len(await all_pets(http)) == 1


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("", id="empty"),
        pytest.param('""', id="empty-quoted"),
        pytest.param("x" * 256, id="256-chars"),
        pytest.param("has space", id="space"),
        pytest.param("tab\there", id="tab"),
        pytest.param("caf\xe9", id="not-ascii"),
        pytest.param('"abc', id="quote-unended"),
        pytest.param('abc"', id="quote-unbegun"),
        pytest.param('"a"b', id="quote-then-more"),
        pytest.param('"a"b"', id="quote-inside-quotes"),
        pytest.param('"a b"', id="space-inside-quotes"),
        pytest.param('"', id="a-quote"),
    ],
)
async def test_malformed_key_is_400_and_stores_nothing(key: str) -> None:
    """Any key but 1 to 255 visible ASCII characters is a 400 validation_error, nothing stored."""
    # Bare or as a quoted string; a bare key beginning or ending with a quote too (quoting gone
    # wrong; each was a new key, and a retry through a proxy that mangled it made a second pet).
    async with service() as http:
        response = await http.post(
            "/v1/pets",
            content=json.dumps(REX).encode(),
            headers=[
                (b"Authorization", AUTHORIZATION),
                (b"Content-Type", b"application/json"),
                (b"Idempotency-Key", key.encode("latin-1")),
            ],
        )
        assert "Idempotency-Key" in assert_error(response, 400, "validation_error")
        assert await all_pets(http) == []


async def test_255_characters_and_two_headers() -> None:
    """255 visible characters are a key; two Idempotency-Key headers are a 400."""
    async with service() as http:
        longest = "~" * 255
        assert (await http.post("/v1/pets", json=REX, headers=keyed(longest))).status_code == 201
        twice = await http.post(
            "/v1/pets",
            json=REX,
            headers=[
                ("Authorization", f"Bearer {KEY}"),
                ("Idempotency-Key", "a"),
                ("Idempotency-Key", "b"),
            ],
        )
        assert_error(twice, 400, "validation_error")
        assert len(await all_pets(http)) == 1


async def test_without_the_header_nothing_changes() -> None:
    """Two identical creates without a key make two pets."""
    async with service() as http:
        await http.post("/v1/pets", json=REX)
        second = await http.post("/v1/pets", json=REX)
        assert "idempotent-replayed" not in second.headers
        assert [pet["id"] for pet in await all_pets(http)] == [1, 2]


async def test_only_a_201_is_remembered() -> None:
    """A keyed create refused (400) leaves the key free: the next use creates."""
    async with service() as http:
        refused = await http.post("/v1/pets", json={"name": ""}, headers=keyed("k"))
        created = await http.post("/v1/pets", json=REX, headers=keyed("k"))
    assert_error(refused, 400, "validation_error")
    assert (created.status_code, created.json()) == (201, {"id": 1, **REX})
    assert "idempotent-replayed" not in created.headers


async def test_keys_are_shared_by_every_api_key() -> None:
    """A retry with another configured API key replays: they share one tenant's keys."""
    async with service() as http:
        first = await http.post("/v1/pets", json=REX, headers=keyed("k"))
        again = await http.post(
            "/v1/pets", json=REX, headers={**keyed("k"), "Authorization": "Bearer second-key-0123"}
        )
    assert (again.status_code, again.content) == (201, first.content)
    assert again.headers["idempotent-replayed"] == "true"


async def test_reset_forgets_the_keys() -> None:
    """After POST /_admin/reset a key creates again, with the id after the seed."""
    async with running(plane_app()) as http:
        http.headers.update(AUTH)
        await http.post("/v1/pets", json=REX, headers=keyed("k"))
        assert (await http.post("/_admin/reset", headers=ADMIN)).status_code == 200
        again = await http.post("/v1/pets", json=TOM, headers=keyed("k"))
        assert (again.status_code, again.json(), "idempotent-replayed" in again.headers) == (
            201,
            {"id": 1, **TOM},
            False,
        )


# --------------------------------------------------------------------------- the data file


def keyed_line(pet: dict[str, Any], key: str, at: int) -> bytes:
    record = {"pet": pet, "idempotencyKey": key, "keyedAt": at}
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


async def test_key_and_pet_are_one_line_and_survive_a_restart(tmp_path: Path) -> None:
    """A keyed create is one line with the pet, key and time; after a restart its retry replays."""
    # Unkeyed creates stay plain Pet lines.
    path = tmp_path / "pets.jsonl"
    async with file_service(path) as http:
        first = await http.post("/v1/pets", json=REX, headers=keyed("k-1"))
        await http.post("/v1/pets", json=TOM)
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[0])
    assert set(record) == {"pet", "idempotencyKey", "keyedAt"}
    assert (record["pet"], record["idempotencyKey"]) == ({"id": 1, **REX}, "k-1")
    assert isinstance(record["keyedAt"], int)
    assert lines[1] == line({"id": 2, **TOM})
    async with file_service(path) as http:
        again = await http.post("/v1/pets", json=REX, headers=keyed("k-1"))
        reused = await http.post("/v1/pets", json=TOM, headers=keyed("k-1"))
        assert (again.status_code, again.content) == (201, first.content)
        assert again.headers["idempotent-replayed"] == "true"
        assert_error(reused, 422, "idempotency_key_reused")
        assert [pet["id"] for pet in await all_pets(http)] == [1, 2]


@pytest.mark.parametrize(
    "written",
    [
        pytest.param(lambda record: json.dumps(record, separators=(",", ":")), id="as-ours"),
        pytest.param(lambda record: json.dumps(record, sort_keys=True), id="sorted"),
        pytest.param(lambda record: "{ " + json.dumps(record)[1:], id="spaced"),
    ],
)
async def test_a_file_with_keys_and_without_loads(
    tmp_path: Path, written: Callable[[dict[str, Any]], str]
) -> None:
    """Plain and keyed lines mix in a data file that loads, the keys known."""
    # Plain lines come from a file from before keys. A keyed line is any JSON of its members: a
    # fixture's library may sort them, or space them (such a line stopped the start as "not a Pet").
    path = tmp_path / "pets.jsonl"
    pet1, pet2 = {"id": 1, **TOM}, {"id": 5, **REX}
    record = {"pet": pet2, "idempotencyKey": "written-by-hand", "keyedAt": 1_700_000_000}
    path.write_bytes(line(pet1) + written(record).encode() + b"\n")
    async with file_service(path) as http:
        assert await all_pets(http) == [pet1, pet2]
        again = await http.post("/v1/pets", json=REX, headers=keyed("written-by-hand"))
        assert again.json() == pet2


@pytest.mark.parametrize(
    "damaged",
    [
        pytest.param(b'{"pet":{"id":2,"name":"Tom","categoryId":2},"keyedAt":1}', id="no-key"),
        pytest.param(
            b'{"pet":{"id":2,"name":"Tom","categoryId":2},"idempotencyKey":"","keyedAt":1}',
            id="empty-key",
        ),
        pytest.param(
            b'{"pet":{"id":2,"name":"Tom","categoryId":2},"idempotencyKey":"a b","keyedAt":1}',
            id="key-with-space",
        ),
        pytest.param(
            b'{"pet":{"id":2,"name":"Tom","categoryId":2},"idempotencyKey":"k"}', id="no-time"
        ),
        pytest.param(
            b'{"pet":{"id":2,"name":"Tom","categoryId":2},"idempotencyKey":"k","keyedAt":1,"x":1}',
            id="unknown-field",
        ),
        pytest.param(b'{"pet":{"id":2,"name":"Tom"},"idempotencyKey":"k","keyedAt":1}', id="pet"),
        pytest.param(
            b'{"idempotencyKey":"k","keyedAt":1,"pet":{"id":2,"name":"Tom"}}', id="pet-sorted"
        ),
    ],
)
def test_a_damaged_keyed_line_is_damage(tmp_path: Path, damaged: bytes) -> None:
    """A keyed line that is not whole is refused at load, naming line 2; the file untouched."""
    path = tmp_path / "pets.jsonl"
    data = keyed_line({"id": 1, **REX}, "first", 1) + damaged + b"\n" + line({"id": 3, **TOM})
    path.write_bytes(data)
    with pytest.raises(DataFileError, match=r"line 2: ") as refused:
        FileStore(str(path))
    assert path.read_bytes() == data
    if b'"name":"Tom"}' in damaged:  # told as a keyed line's, not as a Pet's unknown fields
        assert str(refused.value).endswith("$.pet: object missing required field `categoryId`")


async def test_a_torn_keyed_record_is_cut(tmp_path: Path) -> None:
    """A keyed last line without its newline is a torn record: cut, and the key is free."""
    path = tmp_path / "pets.jsonl"
    path.write_bytes(line({"id": 1, **TOM}) + keyed_line({"id": 2, **REX}, "k", 1)[:-1])
    async with file_service(path) as http:
        again = await http.post("/v1/pets", json=REX, headers=keyed("k"))
        assert (again.json(), "idempotent-replayed" in again.headers) == ({"id": 2, **REX}, False)


async def test_in_flight_key_is_409_then_a_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a create awaits its fdatasync its key gets 409; once durable, a retry replays."""
    # The 409 stores nothing.
    path = tmp_path / "pets.jsonl"
    real_fdatasync = os.fdatasync
    entered, release = threading.Event(), threading.Event()

    def blocking_fdatasync(fd: int) -> None:
        entered.set()
        release.wait(30)
        real_fdatasync(fd)

    monkeypatch.setattr("filestore.os.fdatasync", blocking_fdatasync)
    async with file_service(path) as http:
        first = asyncio.create_task(http.post("/v1/pets", json=REX, headers=keyed("k")))
        try:
            await poll(entered.is_set)
            conflict = await http.post("/v1/pets", json=REX, headers=keyed("k"))
            other_request = await http.post("/v1/pets", json=TOM, headers=keyed("k"))
        finally:
            release.set()
        created = await first
        replay = await http.post("/v1/pets", json=REX, headers=keyed("k"))
    assert_error(conflict, 409, "idempotency_conflict")
    assert_error(other_request, 409, "idempotency_conflict")
    assert created.json() == {"id": 1, **REX}
    assert (replay.content, replay.headers["idempotent-replayed"]) == (created.content, "true")
    assert len(path.read_bytes().splitlines()) == 1


@asynccontextmanager
async def a_held_create(
    key: str,
) -> AsyncIterator[tuple[httpx.AsyncClient, asyncio.Task[httpx.Response]]]:
    """A service with the plane on, and a create with `key` held 300 ms by a fault rule's delay:
    yielded once it is in the app, its key held (the rule's draw is the sign)."""
    drawn = asyncio.Event()

    def chance() -> float:
        drawn.set()
        return 0.0

    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,))
    async with running(plane_app(settings, chance=chance)) as http:
        http.headers.update(AUTH)
        rule = {"operation": "createPet", "delayMs": 300, "probability": 0.5, "times": 1}
        assert (await http.post("/_admin/faults", json=rule, headers=ADMIN)).status_code == 201
        held = asyncio.create_task(http.post("/v1/pets", json=REX, headers=keyed(key)))
        await poll(drawn.is_set)
        yield http, held


async def test_a_key_is_in_flight_from_the_head_through_a_delay_and_a_slow_body() -> None:
    """A key is in flight from its head on: a retry meanwhile is a 409, the first a plain 201."""
    # The first create is held by a fault rule's delay, or with its body still coming; the retry's
    # 409 stores nothing, and the first is answered as usual, a 201 that is no replay. The retry had
    # made the pet, and the first came back `Idempotent-Replayed`.
    async with a_held_create("d") as (http, delayed):
        retry = await http.post("/v1/pets", json=REX, headers=keyed("d"))
        first = await delayed

        body_began, go_on = asyncio.Event(), asyncio.Event()

        async def slow_body() -> AsyncIterator[bytes]:
            yield b'{"name": "Tom", '
            body_began.set()
            await go_on.wait()
            yield b'"categoryId": 2}'

        headers = {**keyed("s"), "Content-Type": "application/json"}
        slow = asyncio.create_task(http.post("/v1/pets", content=slow_body(), headers=headers))
        await poll(body_began.is_set)
        slow_retry = await http.post("/v1/pets", json=TOM, headers=keyed("s"))
        go_on.set()
        second = await slow
        pets = await all_pets(http)
    for conflict in (retry, slow_retry):
        assert_error(conflict, 409, "idempotency_conflict")
    assert (first.status_code, first.json()) == (201, {"id": 1, **REX})
    assert (second.status_code, second.json()) == (201, {"id": 2, **TOM})
    assert "idempotent-replayed" not in {**first.headers, **second.headers}
    assert pets == [{"id": 1, **REX}, {"id": 2, **TOM}]


async def test_a_retry_while_its_key_is_in_flight_is_409_whatever_it_sends() -> None:
    """A retry while its key is held is a 409 whatever its Content-Type or Content-Encoding."""
    # The body's checks (415) came first: a text/plain retry got a 415, not the 409.
    async with a_held_create("t") as (http, first):
        body = json.dumps(REX).encode()
        retries = [
            await http.post("/v1/pets", content=body, headers={**keyed("t"), **headers})
            for headers in (
                {"Content-Type": "text/plain"},
                {"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
        ]
        created = await first
        pets = await all_pets(http)
    for retry in retries:
        assert_error(retry, 409, "idempotency_conflict")
    assert created.status_code == 201
    assert pets == [{"id": 1, **REX}]


async def test_a_malformed_key_is_a_400_before_a_content_type_s_415() -> None:
    """A malformed Idempotency-Key is a 400 before a Content-Type that is not JSON is a 415."""
    # The key is looked at first, for a key in flight's 409 to come before the 415.
    async with service() as http:
        headers = {**keyed('"a'), "Content-Type": "text/plain"}
        refused = await http.post("/v1/pets", content=json.dumps(REX), headers=headers)
        pets = await all_pets(http)
    assert "Idempotency-Key" in assert_error(refused, 400, "validation_error")
    assert pets == []


async def test_creates_refused_before_their_body_is_read_are_journaled_with_it() -> None:
    """A create refused 409, 415 or 400 (its key) before reading its body is journaled with it."""
    # What a retry sent while its first attempt was in flight is what a harness compares: the
    # journal had no `body` for these.
    async with a_held_create("j") as (http, first):
        sent = [
            (b'{"name": "Retry", "categoryId": 1}', {**keyed("j")}),
            (b'{"name": "Plain", "categoryId": 1}', {"Content-Type": "text/plain"}),
            (b'{"name": "Quoted", "categoryId": 1}', keyed('"a')),
        ]
        answers = [
            await http.post(
                "/v1/pets", content=body, headers={"Content-Type": "application/json", **headers}
            )
            for body, headers in sent
        ]
        await first
        journal = (await http.get("/_admin/requests", headers=ADMIN)).json()["requests"]
    assert [answer.status_code for answer in answers] == [409, 415, 400]
    assert [(entry["status"], entry.get("body")) for entry in journal[1:]] == [
        (status, body.decode()) for status, (body, _) in zip([409, 415, 400], sent, strict=True)
    ]


async def test_fault_rules_come_before_a_key_s_409_and_400() -> None:
    """A fault rule answers before a key's 409 or 400, and is counted down by it."""
    # A rule applies to every create past the credential check: a retry whose key another
    # create holds, or a key that is malformed, gets the rule's status first. The 409 and the 400
    # had come first, and the rule's 503 fell on a later create.
    async with a_held_create("h") as (http, first):
        rule = {"operation": "createPet", "status": 503, "times": 2}
        assert (await http.post("/_admin/faults", json=rule, headers=ADMIN)).status_code == 201
        retry = await http.post("/v1/pets", json=REX, headers=keyed("h"))
        malformed = await http.post("/v1/pets", json=REX, headers=keyed('"a'))
        later = await http.post("/v1/pets", json=TOM)
        created = await first
    assert created.status_code == 201
    assert [retry.status_code, malformed.status_code, later.status_code] == [503, 503, 201]
    assert retry.json()["code"] == malformed.json()["code"] == "injected_fault"


@pytest.mark.parametrize("on_file", [False, True], ids=["memory", "data-file"])
async def test_concurrent_creates_with_one_key_make_one_pet(tmp_path: Path, on_file: bool) -> None:
    """16 creates at once with one key and body: one pet; the rest replays of it or 409s."""
    async with file_service(tmp_path / "pets.jsonl") if on_file else service() as http:
        answers = await asyncio.gather(
            *(http.post("/v1/pets", json=REX, headers=keyed("once")) for _ in range(16))
        )
        pets = await all_pets(http)
    created = [
        a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers
    ]
    replays = [a for a in answers if a.headers.get("idempotent-replayed") == "true"]
    conflicts = [a for a in answers if a.status_code == 409]
    assert [a.json() for a in created] == [{"id": 1, **REX}]
    assert all((a.status_code, a.content) == (201, created[0].content) for a in replays)
    for conflict in conflicts:
        assert_error(conflict, 409, "idempotency_conflict")
    assert len(created) + len(replays) + len(conflicts) == 16
    assert pets == [{"id": 1, **REX}]


async def test_a_key_whose_write_failed_is_free_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed create answered 503 (ENOSPC) stored nothing, so the key creates next time."""
    path = tmp_path / "pets.jsonl"

    def no_space(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async with file_service(path) as http:
        with monkeypatch.context() as patch:
            patch.setattr("filestore.os.pwrite", no_space)
            failed = await http.post("/v1/pets", json=REX, headers=keyed("k"))
        again = await http.post("/v1/pets", json=REX, headers=keyed("k"))
    assert_error(failed, 503, "storage_unavailable")
    assert (again.status_code, "idempotent-replayed" in again.headers) == (201, False)
    assert again.json() == {"id": 2, **REX}  # id 1 went to the failed write


async def test_a_key_whose_fsync_failed_is_free_after_the_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key whose create's fdatasync failed was not kept: after the restart it creates."""
    # The failed fdatasync: 503, creates stop until a restart.
    path = tmp_path / "pets.jsonl"

    def broken_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    async with file_service(path) as http:
        with monkeypatch.context() as patch:
            patch.setattr("filestore.os.fdatasync", broken_fdatasync)
            failed = await http.post("/v1/pets", json=REX, headers=keyed("k"))
        still_down = await http.post("/v1/pets", json=REX, headers=keyed("k"))
    assert_error(failed, 503, "storage_unavailable")
    assert_error(still_down, 503, "storage_unavailable")
    async with file_service(path) as http:
        again = await http.post("/v1/pets", json=REX, headers=keyed("k"))
    assert (again.status_code, "idempotent-replayed" in again.headers) == (201, False)


# --------------------------------------------------------------------------- retention


def test_retention_needs_both_the_age_and_the_count() -> None:
    """A key goes only once it is over 24 h old AND 100,000 newer keyed creates followed."""
    keys = IdempotencyKeys()
    pet = Pet(id=1, name="Rex", categoryId=1)
    request = NewPet(name="Rex", categoryId=1)
    old = time.time() - RETAIN_SECONDS - 60
    keys.remember("old", pet, old)
    keys.remember("old-too", pet, old)
    for number in range(RETAIN_KEYS - 2):
        keys.remember(f"k{number}", pet)
    assert keys.claim("old", request) == pet  # old, but 99,999 newer only
    keys.remember("newest", pet)
    assert keys.claim("old", request) is None  # old, and 100,000 newer: forgotten, a new key
    assert keys.claim("old-too", request) == pet  # old, but 99,999 newer only


async def test_a_forgotten_key_used_again_leaves_a_file_that_loads(tmp_path: Path) -> None:
    """A key past its retention is free for another create, and the file then still loads."""
    # The later line is then the key's. Past its retention: over 24 h old, 100,000 newer keyed
    # creates after it. The file then holds the key on two lines. The load had refused it as damage:
    # a file the service wrote, unloadable.
    path = tmp_path / "pets.jsonl"
    made = int(time.time())
    old = made - RETAIN_SECONDS - 3600
    lines = [keyed_line({"id": 1, **REX}, "old-key", old)]
    lines += [keyed_line({"id": n, **TOM}, f"k{n}", made) for n in range(2, RETAIN_KEYS + 2)]
    path.write_bytes(b"".join(lines))
    async with file_service(path) as http:
        again = await http.post("/v1/pets", json=TOM, headers=keyed("old-key"))
        assert (again.status_code, again.json()["id"]) == (201, RETAIN_KEYS + 2)
    async with file_service(path) as http:
        replayed = await http.post("/v1/pets", json=TOM, headers=keyed("old-key"))
        assert (replayed.status_code, replayed.content) == (201, again.content)
        assert replayed.headers["idempotent-replayed"] == "true"
        assert_error(
            await http.post("/v1/pets", json=REX, headers=keyed("old-key")),
            422,
            "idempotency_key_reused",
        )


def test_a_young_key_is_kept_whatever_the_count() -> None:
    """Keys younger than 24 h are all kept, however many newer keys follow."""
    keys = IdempotencyKeys()
    pet = Pet(id=1, name="Rex", categoryId=1)
    for number in range(RETAIN_KEYS + 500):
        keys.remember(f"k{number}", pet)
    assert keys.claim("k0", NewPet(name="Rex", categoryId=1)) == pet


# --------------------------------------------------------------------------- the real process


def test_a_retry_after_a_restart_replays_on_the_real_process(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    """python app.py --data: create with a key, stop, start again: the retry replays."""
    data = tmp_path / "pets.jsonl"
    server = start_server("--data", str(data))
    with server.client() as http:
        first = http.post("/v1/pets", json=REX, headers=keyed("retry-me"))
    assert server.stop() in (0, -15)
    server = start_server("--data", str(data))
    with server.client() as http:
        again = http.post("/v1/pets", json=REX, headers=keyed("retry-me"))
        listed = http.get("/v1/pets").json()
    assert (again.status_code, again.content, again.headers["idempotent-replayed"]) == (
        201,
        first.content,
        "true",
    )
    assert listed == [first.json()]


@pytest.mark.parametrize(
    "value",
    [
        *("abc", '"abc"', 'a"b', '"a\\"b"', '"abc', 'abc"', '"', '""', "x", '"x"'),
        *("x" * 255, "x" * 256, '"' + "x" * 255 + '"', '"' + "x" * 256 + '"'),
    ],
)
async def test_the_document_s_pattern_takes_what_the_service_takes(value: str) -> None:
    """The document's Idempotency-Key pattern takes a value exactly when the service does."""
    # The OpenAPI document's pattern is what a generated client checks.
    async with service() as http:
        response = await http.post("/v1/pets", json=REX, headers=keyed(value))
    assert response.status_code in (201, 400)
    assert (response.status_code == 201) is bool(re.search(IDEMPOTENCY_KEY_PATTERN, value))
