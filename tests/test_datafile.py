"""The data file: JSON Lines format, durable appends, recovery at start, I/O faults, one owner,
seeding."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import create_app
from filestore import DataFileError, FileStore
from schemas import NewPet, Pet, SeedPet, decode, encoder
from settings import Settings
from store import seed_pets
from tests import conftest
from tests.conftest import KEY, ServerFactory, assert_error

REX = {"id": 1, "name": "Rex", "categoryId": 1, "status": "available"}
TOM = {"id": 2, "name": "Tom", "categoryId": 2}
WILMA = {"name": "Wilma", "categoryId": 3, "status": "pending"}


def line(pet: dict[str, Any]) -> bytes:
    """A Pet as the service writes it: compact JSON, fields in schema order, one line."""
    return json.dumps(pet, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


RECORDS = line(REX) + line(TOM)


def os_error(number: int) -> OSError:
    return OSError(number, os.strerror(number))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def storage_unavailable(message: str) -> dict[str, Any]:
    return {"code": "storage_unavailable", "message": message, "status": 503}


@asynccontextmanager
async def serving(file_store: FileStore) -> AsyncIterator[httpx.AsyncClient]:
    """The in-process app over this store, lifespan started (and the store closed at the end)."""
    async with conftest.serving(create_app(Settings(api_keys=(KEY,)), file_store)) as http:
        yield http


async def poll(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Return once `condition()` holds; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.002)  # a poll interval; the loop checks the condition


async def stored_pets(path: Path) -> list[dict[str, Any]]:
    """The pets a fresh FileStore loads from `path` (the store is closed again)."""
    reopened = FileStore(str(path))
    try:
        page = await reopened.page(limit=1000, status=None, after=0)
    finally:
        await reopened.close()
    return [json.loads(encoder.encode(pet)) for pet in page.pets]


# --------------------------------------------------------------------------- format


def test_hand_written_file_is_served_and_appended_to(
    tmp_path: Path, start_server: ServerFactory
) -> None:
    """A hand-written JSON Lines file is served as it is; a create appends one compact line."""
    # Hand-written: any key order, spaces, UTF-8.
    path = tmp_path / "pets.jsonl"
    hand_written = (
        b'{"id": 1, "name": "Rex", "categoryId": 1, "status": "available"}\n'
        b'{"categoryId": 2, "name": "Tom", "id": 2}\n'
        b'{ "id": 7, "name": "Zo\xc3\xab", "categoryId": -3, "status": "sold" }\n'
    )
    path.write_bytes(hand_written)
    server = start_server("--data", str(path))
    with server.client() as http:
        listed = http.get("/v1/pets")
        fetched = http.get("/v1/pets/7")
        untouched = path.read_bytes()
        created = http.post("/v1/pets", json={"name": "Ann", "categoryId": 4})
    assert server.stop() in (0, -15)
    zoe = {"id": 7, "name": "Zoë", "categoryId": -3, "status": "sold"}
    assert (listed.status_code, listed.json()) == (200, [REX, TOM, zoe])
    assert (fetched.status_code, fetched.json()) == (200, zoe)
    assert untouched == hand_written
    ann = {"id": 8, "name": "Ann", "categoryId": 4}
    assert (created.status_code, created.json()) == (201, ann)
    assert path.read_bytes() == hand_written + line(ann)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "pet"),
    [
        ({"name": "Rex", "categoryId": 1, "status": "available"}, REX),
        ({"name": "Rex", "categoryId": 1}, {"id": 1, "name": "Rex", "categoryId": 1}),
        ({"name": "Zoë ✓", "categoryId": -5}, {"id": 1, "name": "Zoë ✓", "categoryId": -5}),
        (
            {"name": "Big", "categoryId": 2**63 - 1},
            {"id": 1, "name": "Big", "categoryId": 2**63 - 1},
        ),
        ({"name": "One", "categoryId": 1.0}, {"id": 1, "name": "One", "categoryId": 1}),
    ],
    ids=["with status", "without status", "unicode name", "int64 max", "integral float"],
)
async def test_create_appends_exactly_one_line(
    tmp_path: Path, body: dict[str, Any], pet: dict[str, Any]
) -> None:
    """A create appends one line holding the returned Pet, and a restart loads it back."""
    path = tmp_path / "pets.jsonl"
    async with serving(FileStore(str(path))) as http:
        created = await http.post("/v1/pets", json=body)
    assert (created.status_code, created.json()) == (201, pet)
    assert path.read_bytes() == line(pet)
    assert await stored_pets(path) == [pet]


# --------------------------------------------------------------------------- the append path


@pytest.mark.anyio
async def test_created_only_after_the_fdatasync_covering_it_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create is answered 201 only after the fdatasync covering its record returns."""
    # While the fdatasync that covers a create blocks, the create has no answer and no reader sees
    # the pet; the record was written before that fdatasync.
    path = tmp_path / "pets.jsonl"
    real_fdatasync = os.fdatasync
    entered, release = threading.Event(), threading.Event()
    file_at_fdatasync: list[bytes] = []

    def blocking_fdatasync(fd: int) -> None:
        file_at_fdatasync.append(path.read_bytes())
        entered.set()
        release.wait(30)
        real_fdatasync(fd)

    monkeypatch.setattr("filestore.os.fdatasync", blocking_fdatasync)
    async with serving(FileStore(str(path))) as http:
        create = asyncio.create_task(http.post("/v1/pets", json=WILMA))
        try:
            await poll(entered.is_set)
            listed = await http.get("/v1/pets")
            fetched = await http.get("/v1/pets/1")
            ready = await http.get("/readyz")
            answered_early = create.done()  # the reads above gave the create time to finish
        finally:
            release.set()
        created = await create
    wilma = {"id": 1, **WILMA}
    assert not answered_early
    assert (listed.status_code, listed.json()) == (200, [])
    assert (fetched.status_code, fetched.json()) == (
        404,
        {"code": "not_found", "message": "No pet has id 1", "status": 404},
    )
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
    assert (created.status_code, created.json()) == (201, wilma)
    assert created.headers["location"] == "/v1/pets/1"
    assert file_at_fdatasync == [line(wilma)]


class CountingFileStore(FileStore):
    """A FileStore that counts the creates that reached it."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.adds = 0

    async def add(self, new_pet: NewPet, key: str | None = None) -> tuple[Pet, bool]:
        self.adds += 1
        return await super().add(new_pet, key)


@pytest.mark.anyio
async def test_concurrent_creates_share_fdatasyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates arriving during a slow fdatasync share fdatasyncs: fewer of them than creates."""
    # 50 creates, 50 distinct ids, all of them there after a restart.
    path = tmp_path / "pets.jsonl"
    real_fdatasync = os.fdatasync
    calls: list[int] = []
    release = threading.Event()

    def slow_fdatasync(fd: int) -> None:
        calls.append(fd)
        release.wait(30)
        real_fdatasync(fd)

    monkeypatch.setattr("filestore.os.fdatasync", slow_fdatasync)
    file_store = CountingFileStore(str(path))
    async with serving(file_store) as http:
        creates = [
            asyncio.create_task(http.post("/v1/pets", json={"name": f"pet{n}", "categoryId": n}))
            for n in range(50)
        ]
        try:
            # The first fdatasync is stuck and every other create has reached the store.
            await poll(lambda: len(calls) == 1 and file_store.adds == 50)
        finally:
            release.set()
        responses = await asyncio.gather(*creates)
    assert [response.status_code for response in responses] == [201] * 50
    created = [response.json() for response in responses]
    assert sorted(pet["id"] for pet in created) == list(range(1, 51))
    # One fdatasync for what was queued when the writer woke first, one for all the rest.
    assert len(calls) <= 2
    assert await stored_pets(path) == sorted(created, key=lambda pet: pet["id"])
    assert path.read_bytes() == b"".join(line(pet) for pet in await stored_pets(path))


# --------------------------------------------------------------------------- recovery at start

TORN = {"id": 3, "name": "Ann", "categoryId": 3, "status": "sold"}
TORN_LINE = line(TORN)
TORN_TAILS = [
    *[
        pytest.param(RECORDS, TORN_LINE[:cut], id=f"first {cut} bytes of a record")
        for cut in range(1, len(TORN_LINE) - 1)
    ],
    pytest.param(RECORDS, TORN_LINE[:-1], id="a record without its newline"),
    pytest.param(RECORDS, b"\0" * 10, id="10 NULs"),
    pytest.param(RECORDS, b"\0" * (len(TORN_LINE) - 1) + b"\n", id="a line of NULs"),
    pytest.param(RECORDS, TORN_LINE[:20] + b"\0" * 30, id="part of a record, then NULs"),
    pytest.param(
        RECORDS,
        TORN_LINE[:20] + b"\0" * (len(TORN_LINE) - 21) + b"\n",
        id="a line part record, part NULs",
    ),
    pytest.param(b"", TORN_LINE[:-1], id="nothing but a torn record"),
    pytest.param(b"", b"\0" * 4096, id="nothing but NULs"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("records", "tail"), TORN_TAILS)
async def test_torn_tail_is_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, records: bytes, tail: bytes
) -> None:
    """A torn last record is cut off at load with a warning naming the dropped bytes."""
    # The whole records load, and the next create appends cleanly after them.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(records + tail)
    with caplog.at_level(logging.WARNING, logger="petstore"):
        file_store = FileStore(str(path))
    truncated = path.read_bytes()
    async with serving(file_store) as http:
        listed = await http.get("/v1/pets")
        created = await http.post("/v1/pets", json=WILMA)
    whole = [REX, TOM] if records else []
    wilma = {"id": len(whole) + 1, **WILMA}
    assert truncated == records
    assert [(record.name, record.levelno) for record in caplog.records] == [
        ("petstore", logging.WARNING)
    ]
    assert caplog.records[0].getMessage() == (
        f"data file {path}: dropped a torn last record ({len(tail)} bytes from byte {len(records)})"
    )
    assert (listed.status_code, listed.json()) == (200, whole)
    assert (created.status_code, created.json()) == (201, wilma)
    assert path.read_bytes() == records + line(wilma)


LINE_3 = line({"id": 3, "name": "Ann", "categoryId": 3})


def keyed_line(pet: dict[str, Any], key: str, at: int) -> bytes:
    """A keyed create's line as the service writes it."""
    record = {"pet": pet, "idempotencyKey": key, "keyedAt": at}
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


DAMAGE = [
    pytest.param(
        line(REX) + b'{"id":2,"name":"Tom"\n' + LINE_3,
        2,
        "not a Pet: Input data was truncated",
        id="bad JSON mid-file",
    ),
    pytest.param(
        line(REX) + b'{"id":2,"name":"Tom"}\n' + LINE_3,
        2,
        "not a Pet: Object missing required field `categoryId`",
        id="missing field",
    ),
    pytest.param(
        line(REX) + b'{"id":2,"name":"Tom","categoryId":2,"color":"red"}\n' + LINE_3,
        2,
        "not a Pet: Object contains unknown field `color`",
        id="extra field",
    ),
    pytest.param(
        b'{"id":0,"name":"Tom","categoryId":2}\n' + LINE_3,
        1,
        "not a Pet: $.id: expected an integer >= 1",
        id="id 0",
    ),
    pytest.param(
        line(REX) + b'{"id":2,"name":"Tom","categoryId":1.5}\n' + LINE_3,
        2,
        "not a Pet: $.categoryId: expected an integer, got a number",
        id="categoryId 1.5",
    ),
    pytest.param(  # a seed and a body take 1.0; the data file holds what the service writes
        line(REX) + b'{"id":2,"name":"Tom","categoryId":1.0}\n' + LINE_3,
        2,
        "not a Pet: $.categoryId: expected an integer, got a number",
        id="categoryId 1.0",
    ),
    pytest.param(
        line(REX) + b'{"id":2,"name":"Tom","categoryId":2,"status":"x"}\n' + LINE_3,
        2,
        "not a Pet: $.status: invalid enum value 'x'",
        id="unknown status",
    ),
    pytest.param(
        line(REX) + b'{"id":2,"name":"","categoryId":2}\n' + LINE_3,
        2,
        "not a Pet: $.name: expected a string of length >= 1",
        id="empty name",
    ),
    pytest.param(
        line(REX) + b'["Tom",2]\n' + LINE_3,
        2,
        "not a Pet: Expected an object, got an array",
        id="not an object",
    ),
    pytest.param(
        line(REX) + LINE_3 + line(TOM),
        3,
        "id 2 is not above the id 3 before it",
        id="ids not increasing",
    ),
    pytest.param(
        line(REX) + LINE_3 + LINE_3,
        3,
        "id 3 is not above the id 3 before it",
        id="id repeated",
    ),
    pytest.param(
        keyed_line(REX, "k-1", 1) + keyed_line({"id": 1, **WILMA}, "k-2", 1),
        2,
        "id 1 is not above the id 1 before it",
        id="keyed ids not increasing",
    ),
    pytest.param(
        line(REX) + b'{"id":2,"name":"T\xffm","categoryId":2}\n' + LINE_3,
        2,
        "not a Pet: invalid UTF-8",
        id="invalid UTF-8 in a string",
    ),
    pytest.param(
        line(REX) + b"\xff\xfe\n" + LINE_3,
        2,
        "not a Pet: JSON is malformed: invalid character (byte 0)",
        id="invalid UTF-8 line",
    ),
    pytest.param(
        line(REX) + b"\n" + LINE_3,
        2,
        "not a Pet: the line is empty",
        id="empty line mid-file",
    ),
    pytest.param(
        line(REX) + b"   \n" + LINE_3,
        2,
        "not a Pet: the line is empty",
        id="blank line mid-file",
    ),
    pytest.param(
        RECORDS + b"garbage\n",
        3,
        "not a Pet: JSON is malformed: invalid character (byte 0)",
        id="garbage complete last line",
    ),
    pytest.param(
        RECORDS + b"\n",
        3,
        "not a Pet: the line is empty",
        id="empty complete last line",
    ),
    pytest.param(
        line(REX) + line(TOM)[:-1] + b" " + LINE_3,
        2,
        "not a Pet: JSON is malformed: trailing characters (byte 38)",
        id="two records on one line",
    ),
    pytest.param(
        line(REX)
        + b'{"id":2,"name":"Tom"\n'
        + b'"categoryId":2},{"id":3,"name":"Ann","categoryId":3}\n',
        2,
        "not a Pet: Input data was truncated",
        id="a record split over two lines, two records on the next",
    ),
    pytest.param(
        line(REX) + b'{"id":2,"name":"Tom"}\n' + LINE_3 + TORN_LINE[:10],
        2,
        "not a Pet: Object missing required field `categoryId`",
        id="damage mid-file and a torn tail",
    ),
    pytest.param(  # zeros with lines after them are no crash's torn end
        line(REX) + b"\0" * 10 + b"\n" + LINE_3,
        2,
        "not a Pet: JSON is malformed: invalid character (byte 0)",
        id="NULs mid-file",
    ),
]


@pytest.mark.parametrize(("content", "line_number", "reason"), DAMAGE)
def test_damaged_file_is_refused_and_left_untouched(
    tmp_path: Path, content: bytes, line_number: int, reason: str
) -> None:
    """Damage other than a torn tail raises DataFileError naming the line; the file is untouched."""
    # The error names the file and the line; the file is left byte for byte as it was.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(content)
    before = digest(path)
    with pytest.raises(DataFileError) as raised:
        FileStore(str(path))
    assert str(raised.value) == f"data file {path}, line {line_number}: {reason}"
    assert digest(path) == before
    # The lock went with the failed open: the same error again, not "in use".
    with pytest.raises(DataFileError, match="line"):
        FileStore(str(path))


def test_damaged_file_stops_the_process_with_one_line(
    tmp_path: Path, start_server: ServerFactory
) -> None:
    """`python app.py --data DAMAGED` exits 2 with one `petstore: ...` line, the file untouched."""
    # The line names the file and the line; no traceback.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(line(REX) + b'{"id":2,"name":"Tom"}\n' + LINE_3)
    before = digest(path)
    server = start_server("--data", str(path), wait=False)
    assert server.process.wait(15) == 2
    assert server.stderr == (
        f"petstore: data file {path}, line 2: not a Pet: "
        "Object missing required field `categoryId`\n"
    )
    assert digest(path) == before


def test_torn_tail_real_process_starts_and_warns(
    tmp_path: Path, start_server: ServerFactory
) -> None:
    """`python app.py --data TORN` drops the torn record, says so on stderr, and serves the rest."""
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS + TORN_LINE[:25])
    server = start_server("--data", str(path))
    with server.client() as http:
        listed = http.get("/v1/pets")
        created = http.post("/v1/pets", json=WILMA)
    assert server.stop() in (0, -15)
    wilma = {"id": 3, **WILMA}
    assert (listed.status_code, listed.json()) == (200, [REX, TOM])
    assert (created.status_code, created.json()) == (201, wilma)
    assert path.read_bytes() == RECORDS + line(wilma)
    assert f"data file {path}: dropped a torn last record (25 bytes from byte {len(RECORDS)})" in (
        server.stderr
    )
    assert "Traceback" not in server.stderr


KEYED_REX, KEYED_TOM = keyed_line(REX, "k-1", 1), keyed_line(TOM, "k-2", 2)


def without_id(pet: dict[str, Any]) -> dict[str, Any]:
    """The create a pet was made from."""
    return {name: value for name, value in pet.items() if name != "id"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("content", "keys"),
    [
        pytest.param(RECORDS, [], id="plain lines"),
        pytest.param(KEYED_REX + KEYED_TOM, ["k-1", "k-2"], id="keyed lines"),
        pytest.param(line(REX) + KEYED_TOM, ["k-2"], id="both"),
    ],
)
async def test_plain_and_keyed_lines_load_alike(
    tmp_path: Path, content: bytes, keys: list[str]
) -> None:
    """A file of plain lines, of keyed lines or of both loads its pets, and its keys replay."""
    path = tmp_path / "pets.jsonl"
    path.write_bytes(content)
    async with serving(FileStore(str(path))) as http:
        listed = await http.get("/v1/pets")
        replays = [
            await http.post("/v1/pets", json=without_id(body), headers={"Idempotency-Key": key})
            for key, body in [("k-1", REX), ("k-2", TOM)]
            if key in keys
        ]
    assert listed.json() == [REX, TOM]
    assert [(r.status_code, r.headers["idempotent-replayed"]) for r in replays] == [
        (201, "true")
    ] * len(keys)
    assert path.read_bytes() == content


# --------------------------------------------------------------------------- I/O faults


@pytest.mark.anyio
async def test_failed_write_is_503_and_creates_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A write failing with ENOSPC is 503 storage_unavailable, the file as before; creates go on."""
    # The store still takes creates, and the failed create's id is never handed out.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)

    def no_space(fd: int, data: bytes, offset: int) -> int:
        raise os_error(errno.ENOSPC)

    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            patch.setattr("filestore.os.pwrite", no_space)
            failed = await http.post("/v1/pets", json=WILMA)
        after_failure = path.read_bytes()
        ready = await http.get("/readyz")
        created = await http.post("/v1/pets", json=WILMA)
    assert (failed.status_code, failed.json()) == (
        503,
        storage_unavailable("The data file can't be written: No space left on device"),
    )
    assert after_failure == RECORDS
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
    wilma = {"id": 4, **WILMA}  # id 3 went to the failed write
    assert (created.status_code, created.json()) == (201, wilma)
    assert path.read_bytes() == RECORDS + line(wilma)
    assert [
        (record.name, record.levelno, record.getMessage())
        for record in caplog.records
        if record.levelno >= logging.WARNING
    ] == [
        (
            "petstore",
            logging.ERROR,
            f"data file {path}: The data file can't be written: No space left on device",
        )
    ]


@pytest.mark.anyio
async def test_short_write_is_a_503_and_cut_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that stores part of a record: 503, the part cut off; creates go on under a new id."""
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    real_pwrite = os.pwrite
    file_after_write: list[bytes] = []

    def short(fd: int, data: bytes, offset: int) -> int:
        written = real_pwrite(fd, memoryview(data)[:10], offset)
        file_after_write.append(path.read_bytes())
        return written

    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            patch.setattr("filestore.os.pwrite", short)
            failed = await http.post("/v1/pets", json=WILMA)
        after_failure = path.read_bytes()
        created = await http.post("/v1/pets", json=WILMA)
    assert (failed.status_code, failed.json()) == (
        503,
        storage_unavailable("The data file can't be written: a short write"),
    )
    assert file_after_write == [RECORDS + line({"id": 3, **WILMA})[:10]]
    assert after_failure == RECORDS
    wilma = {"id": 4, **WILMA}
    assert (created.status_code, created.json()) == (201, wilma)
    assert path.read_bytes() == RECORDS + line(wilma)


@pytest.mark.anyio
async def test_failed_fdatasync_stops_creates_until_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An fdatasync failing with EIO is a 503 and stops creates until a restart; reads go on."""
    # The record is cut off; every later create 503 and /readyz 503 even once fdatasync works again,
    # reads still 200; the file loads again afterwards.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    file_at_fdatasync: list[bytes] = []

    def broken_fdatasync(fd: int) -> None:
        file_at_fdatasync.append(path.read_bytes())
        raise os_error(errno.EIO)

    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            patch.setattr("filestore.os.fdatasync", broken_fdatasync)
            failed = await http.post("/v1/pets", json=WILMA)
        after_failure = path.read_bytes()
        later = [await http.post("/v1/pets", json=WILMA) for _ in range(3)]
        ready = await http.get("/readyz")
        listed = await http.get("/v1/pets")
        fetched = await http.get("/v1/pets/2")
    assert (failed.status_code, failed.json()) == (
        503,
        storage_unavailable("The data file can't be made durable: Input/output error"),
    )
    assert file_at_fdatasync == [RECORDS + line({"id": 3, **WILMA})]
    assert after_failure == RECORDS
    stopped = (
        "The store takes no writes: fsync failed: Input/output error; creates stop until a restart"
    )
    assert [(response.status_code, response.json()) for response in later] == [
        (503, storage_unavailable(stopped))
    ] * 3
    assert (ready.status_code, ready.json()) == (503, storage_unavailable(stopped))
    assert (listed.status_code, listed.json()) == (200, [REX, TOM])
    assert (fetched.status_code, fetched.json()) == (200, TOM)
    assert any(
        record.levelno == logging.ERROR and "fsync failed" in record.getMessage()
        for record in caplog.records
    )
    assert path.read_bytes() == RECORDS
    # A restart reloads the file. The failed id 3 was never acknowledged to anyone, and the
    # next id after a load is the last one in the file plus one: 3 is handed out now.
    async with serving(FileStore(str(path))) as http:
        created = await http.post("/v1/pets", json=WILMA)
    assert (created.status_code, created.json()) == (201, {"id": 3, **WILMA})


@pytest.mark.anyio
@pytest.mark.parametrize("failing", ["fdatasync", "pwrite"])
async def test_a_failed_commit_that_cannot_be_cut_off_stops_creates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    """A failed commit whose lines can't be cut off: a 503, and creates stop until a restart."""
    # A filesystem gone read-only, a dead disk: the lines left may load at the next start, so no
    # later line may follow them.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    real_pwrite = os.pwrite

    def whole_then_eio(fd: int, data: bytes, offset: int) -> int:
        real_pwrite(fd, data, offset)
        raise os_error(errno.EIO)

    def broken(*args: object) -> None:
        raise os_error(errno.EIO)

    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            if failing == "fdatasync":
                patch.setattr("filestore.os.fdatasync", broken)
            else:
                patch.setattr("filestore.os.pwrite", whole_then_eio)
            patch.setattr("filestore.os.ftruncate", broken)
            failed = await http.post("/v1/pets", json=WILMA)
        later = await http.post("/v1/pets", json=WILMA)
        ready = await http.get("/readyz")
    reason = {"fdatasync": "can't be made durable", "pwrite": "can't be written"}[failing]
    assert (failed.status_code, failed.json()) == (
        503,
        storage_unavailable(f"The data file {reason}: Input/output error"),
    )
    stopped = storage_unavailable(
        "The store takes no writes: cannot cut a failed write off: Input/output error;"
        " creates stop until a restart"
    )
    assert [(r.status_code, r.json()) for r in (later, ready)] == [(503, stopped)] * 2


@pytest.mark.anyio
async def test_a_bug_in_the_writer_stops_creates_and_answers_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the writer thread is logged; its creates are answered 503, later ones refused."""
    # An exception the writer thread did not expect is logged with its traceback, its creates
    # answered 503 and later ones refused, /readyz 503, rather than every create waiting for ever.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)

    def a_bug(self: FileStore, data: bytes) -> str | None:
        raise RuntimeError("a bug")

    keyed = {"Idempotency-Key": "order-9"}
    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            patch.setattr(FileStore, "_append", a_bug)
            failed = await asyncio.wait_for(http.post("/v1/pets", json=WILMA, headers=keyed), 5)
        later = await asyncio.wait_for(http.post("/v1/pets", json=WILMA), 5)
        # Its key free again: the retry is told the store takes no writes, not 409 in flight.
        keyed_retry = await http.post("/v1/pets", json=WILMA, headers=keyed)
        ready = await http.get("/readyz")
    stopped = storage_unavailable(
        "The store takes no writes: the writer failed; creates stop until a restart"
    )
    answers = [(r.status_code, r.json()) for r in (failed, later, keyed_retry, ready)]
    assert answers == [(503, stopped)] * 4
    assert any(
        "the writer failed" in record.getMessage() and record.exc_info for record in caplog.records
    )


@pytest.mark.anyio
async def test_a_new_data_file_is_made_durable_in_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data file's directory is fsynced at the start (the one a symlink points into)."""
    # Else a power cut could take the new file's name, and the pets acknowledged in it.
    real, linked = tmp_path / "real", tmp_path / "linked"
    real.mkdir()
    linked.mkdir()
    (linked / "pets.jsonl").symlink_to(real / "pets.jsonl")
    real_fsync = os.fsync
    synced: list[str] = []

    def noted_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    with monkeypatch.context() as patch:
        patch.setattr("filestore.os.fsync", noted_fsync)
        await FileStore(str(linked / "pets.jsonl")).close()
        await FileStore(str(linked / "pets.jsonl")).close()
    assert synced == [str(real)] * 2
    assert (real / "pets.jsonl").read_bytes() == b""


# --------------------------------------------------------------------------- one owner


@pytest.mark.anyio
async def test_second_store_on_the_same_file_is_refused(tmp_path: Path) -> None:
    """A second FileStore on a file in use raises DataFileError; once the first closes, it opens."""
    # The file is left alone.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    first = FileStore(str(path))
    try:
        with pytest.raises(DataFileError) as raised:
            FileStore(str(path))
    finally:
        await first.close()
    assert str(raised.value) == f"data file {path}: in use by another petstore process"
    assert path.read_bytes() == RECORDS
    assert await stored_pets(path) == [REX, TOM]


def test_second_process_is_refused_and_a_killed_owner_does_not_block(
    tmp_path: Path, start_server: ServerFactory
) -> None:
    """A second process on the data file exits 2; after SIGKILL of the owner, a restart succeeds."""
    # The second `python app.py` on the same data file names the file, which stays as it was.
    path = tmp_path / "pets.jsonl"
    owner = start_server("--data", str(path))
    with owner.client() as http:
        created = http.post("/v1/pets", json=WILMA)
    before = digest(path)
    second = start_server("--data", str(path), wait=False)
    assert second.process.wait(15) == 2
    assert second.stderr == (f"petstore: data file {path}: in use by another petstore process\n")
    assert digest(path) == before
    with owner.client() as http:
        still_served = http.get("/v1/pets")
    owner.process.kill()
    owner.process.wait(15)
    restarted = start_server("--data", str(path))
    with restarted.client() as http:
        listed = http.get("/v1/pets")
    assert restarted.stop() in (0, -15)
    wilma = {"id": 1, **WILMA}
    assert (created.status_code, created.json()) == (201, wilma)
    assert (still_served.status_code, still_served.json()) == (200, [wilma])
    assert (listed.status_code, listed.json()) == (200, [wilma])


# --------------------------------------------------------------------------- seeding

SEED = [
    {"name": "Rex", "categoryId": 1, "status": "available"},
    {"id": 10, "name": "Tom", "categoryId": 2},
    {"name": "Ann", "categoryId": 3.0, "status": "sold"},
]
SEEDED = [
    {"id": 1, "name": "Rex", "categoryId": 1, "status": "available"},
    {"id": 10, "name": "Tom", "categoryId": 2},
    {"id": 11, "name": "Ann", "categoryId": 3, "status": "sold"},
]


def seed_options(how: str, seed_path: Path) -> tuple[list[str], dict[str, str]]:
    """The flag or the environment variable naming the seed file."""
    if how == "flag":
        return ["--seed", str(seed_path)], {}
    return [], {"PETSTORE_SEED": str(seed_path)}


@pytest.mark.parametrize("how", ["flag", "env"])
def test_seed_fills_the_memory_store_on_every_start(
    tmp_path: Path, start_server: ServerFactory, how: str
) -> None:
    """Without a data file, every start holds exactly the seed pets."""
    # Ids in order, given ids kept; pets created in a run are gone at the next.
    seed_path = tmp_path / "seed.json"
    seed_path.write_text(json.dumps(SEED))
    args, env = seed_options(how, seed_path)
    listings = []
    created = []
    for _ in range(2):
        server = start_server(*args, env=env)
        with server.client() as http:
            listings.append(http.get("/v1/pets"))
            created.append(http.post("/v1/pets", json=WILMA))
        assert server.stop() in (0, -15)
    assert [(response.status_code, response.json()) for response in listings] == [(200, SEEDED)] * 2
    assert [(response.status_code, response.json()) for response in created] == [
        (201, {"id": 12, **WILMA})
    ] * 2


@pytest.mark.parametrize("how", ["flag", "env"])
@pytest.mark.parametrize("state", ["missing", "empty"])
def test_seed_fills_a_new_data_file_once(
    tmp_path: Path, start_server: ServerFactory, how: str, state: str
) -> None:
    """A data file that is new or empty gets the seed pets; a restart adds nothing twice."""
    # The restart is with the same seed.
    seed_path = tmp_path / "seed.json"
    seed_path.write_text(json.dumps(SEED))
    path = tmp_path / "pets.jsonl"
    if state == "empty":
        path.write_bytes(b"")
    args, env = seed_options(how, seed_path)
    first = start_server("--data", str(path), *args, env=env)
    with first.client() as http:
        seeded = http.get("/v1/pets")
        created = http.post("/v1/pets", json=WILMA)
    assert first.stop() in (0, -15)
    second = start_server("--data", str(path), *args, env=env)
    with second.client() as http:
        listed = http.get("/v1/pets")
    assert second.stop() in (0, -15)
    wilma = {"id": 12, **WILMA}
    assert (seeded.status_code, seeded.json()) == (200, SEEDED)
    assert (created.status_code, created.json()) == (201, wilma)
    assert (listed.status_code, listed.json()) == (200, [*SEEDED, wilma])
    assert path.read_bytes() == b"".join(line(pet) for pet in [*SEEDED, wilma])


def test_seed_leaves_a_data_file_with_pets_alone(
    tmp_path: Path, start_server: ServerFactory
) -> None:
    """A data file that already holds pets is not seeded, and not written to at start."""
    seed_path = tmp_path / "seed.json"
    seed_path.write_text(json.dumps(SEED))
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    server = start_server("--data", str(path), "--seed", str(seed_path))
    with server.client() as http:
        listed = http.get("/v1/pets")
    assert server.stop() in (0, -15)
    assert (listed.status_code, listed.json()) == (200, [REX, TOM])
    assert path.read_bytes() == RECORDS


BAD_SEEDS = [
    pytest.param(b"", "it is empty", id="empty"),
    pytest.param(
        b'[{"name": "Rex", "categoryId": 1}',
        "Input data was truncated",
        id="not JSON",
    ),
    pytest.param(  # the syntax, not the wrong type met before it (as in a body)
        b'[{"name": "a", "categoryId": "1"}, {"name": "b",',
        "Input data was truncated",
        id="not JSON after a wrong type",
    ),
    pytest.param(
        b"[" * 5000 + b"]" * 5000,
        "nested too deeply to read",
        id="nested too deeply",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1}',
        "Expected an array, got an object",
        id="not an array",
    ),
    pytest.param(
        b'[{"name": "Rex", "categoryId": 1, "color": "red"}]',
        "$[0]: object contains unknown field `color`",
        id="unknown field",
    ),
    pytest.param(
        b'[{"id": 5, "name": "Rex", "categoryId": 1}, {"id": 5, "name": "Tom", "categoryId": 2}]',
        "item 1: id 5 is not above the id 5 before it",
        id="ids not increasing",
    ),
    pytest.param(
        b'[{"id": 0, "name": "Rex", "categoryId": 1}]',
        "$[0].id: expected an integer >= 1",
        id="id zero",
    ),
    pytest.param(
        b'[{"id": 2.5, "name": "Rex", "categoryId": 1}]',
        "$[0].id: expected an integer, got a number",
        id="id with a fraction",
    ),
    pytest.param(None, "No such file or directory", id="missing file"),
]


@pytest.mark.parametrize("store_option", ["memory", "data file"])
@pytest.mark.parametrize(("content", "reason"), BAD_SEEDS)
def test_bad_seed_stops_the_start(
    tmp_path: Path,
    start_server: ServerFactory,
    content: bytes | None,
    reason: str,
    store_option: str,
) -> None:
    """A bad seed file stops the start: exit 2, one line naming the file and why, no data file."""
    # The line is on stderr.
    seed_path = tmp_path / "seed.json"
    if content is not None:
        seed_path.write_bytes(content)
    args = ["--seed", str(seed_path)]
    if store_option == "data file":
        args += ["--data", str(tmp_path / "pets.jsonl")]
    server = start_server(*args, wait=False)
    assert server.process.wait(15) == 2
    assert server.stderr.startswith(f"petstore: --seed {seed_path}: ")
    assert reason in server.stderr
    assert server.stderr.count("\n") == 1
    assert server.stdout == ""
    assert not (tmp_path / "pets.jsonl").exists()


def test_a_seed_counts_integers_as_json_schema_does() -> None:
    """`2.0` and `1e1` are integers in a seed file, ids and categories, stored as plain ints."""
    # As in a body.
    seed = decode(
        b'[{"id": 2.0, "name": "Rex", "categoryId": 1.0},'
        b' {"id": 1e1, "name": "Tom", "categoryId": 2}]',
        list[SeedPet],
    )
    pets = seed_pets(seed)
    assert pets == [Pet(id=2, name="Rex", categoryId=1), Pet(id=10, name="Tom", categoryId=2)]
    assert {type(pet.id) for pet in pets} == {type(pet.categoryId) for pet in pets} == {int}


@pytest.mark.anyio
async def test_past_the_last_int64_id_a_create_is_a_503_and_the_file_still_loads(
    tmp_path: Path,
) -> None:
    """Once a pet holds id 2**63 - 1, a create is refused 503 storage_unavailable, keyed or not."""
    # Instead of storing an id that getPet refuses and that the next start could not load. The
    # store says it takes no writes, as after a failed fdatasync: /readyz 503 and the metric 0
    # (they said 200 and 1 while every create was refused).
    last = {"id": 2**63 - 1, "name": "Last", "categoryId": 1}
    path = tmp_path / "pets.jsonl"
    path.write_bytes(line(last))
    async with serving(FileStore(str(path))) as http:
        plain = await http.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
        keyed = await http.post(
            "/v1/pets", json={"name": "Rex", "categoryId": 1}, headers={"Idempotency-Key": "k-1"}
        )
        ready = await http.get("/readyz")
        scraped = (await http.get("/metrics")).text
    for refused in (plain, keyed, ready):
        message = assert_error(refused, 503, "storage_unavailable")
        assert "9223372036854775807 is taken" in message
    assert "\npetstore_store_writable 0.0\n" in scraped
    assert path.read_bytes() == line(last)
    assert await stored_pets(path) == [last]
