"""The data file: JSON Lines format, durable appends, recovery at start, I/O faults, one owner,
seeding."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import json
import logging
import os
import stat
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import create_app
from datafile import FileStore
from records import WRITE_MAX, DataFileError
from schemas import CategoryId, NewPet, Pet, encoder, seed_decoder
from settings import Settings
from store import Added, seed_pets
from tests.conftest import AUTH, KEY, ServerFactory, assert_error

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
    app = create_app(Settings(api_keys=(KEY,)), file_store, access_log=io.StringIO())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://petstore", headers=AUTH) as http,
    ):
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

    monkeypatch.setattr("datafile.os.fdatasync", blocking_fdatasync)
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

    async def add(self, new_pet: NewPet, idempotency_key: str | None = None) -> Added:
        self.adds += 1
        return await super().add(new_pet, idempotency_key)


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

    monkeypatch.setattr("datafile.os.fdatasync", slow_fdatasync)
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
    # A power cut in a group commit's write over two blocks: the second landed, not the first.
    pytest.param(
        RECORDS,
        b"\0" * (4096 - len(RECORDS)) + TORN_LINE[7:] + line({"id": 4, **WILMA}),
        id="NULs to a block's end, then the lines of the next block",
    ),
    # The same in one line longer than a commit's WRITE_MAX (a name under a larger --max-body):
    # it was written alone, and its zeros may be any distance from the end.
    pytest.param(
        RECORDS,
        b"\0" * (4096 - len(RECORDS)) + b"x" * (1 << 21) + b'","categoryId":1}\n',
        id="NULs to a block's end in one line longer than a commit's most",
    ),
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
    with caplog.at_level(logging.WARNING, logger="petstore.store"):
        file_store = FileStore(str(path))
    truncated = path.read_bytes()
    async with serving(file_store) as http:
        listed = await http.get("/v1/pets")
        created = await http.post("/v1/pets", json=WILMA)
    whole = [REX, TOM] if records else []
    wilma = {"id": len(whole) + 1, **WILMA}
    assert truncated == records
    assert [(record.name, record.levelno) for record in caplog.records] == [
        ("petstore.store", logging.WARNING)
    ]
    warning = caplog.records[0].getMessage()
    assert str(path) in warning
    assert f"{len(tail)} bytes from byte {len(records)}" in warning
    assert (listed.status_code, listed.json()) == (200, whole)
    assert (created.status_code, created.json()) == (201, wilma)
    assert path.read_bytes() == records + line(wilma)


LINE_3 = line({"id": 3, "name": "Ann", "categoryId": 3})
# More lines than one commit writes (records.WRITE_MAX, a MiB).
MANY = b"".join(
    line({"id": n, "name": f"pet number {n}", "categoryId": 1}) for n in range(1, 30_000)
)
NUL_LINE = (
    "not a Pet: it holds NUL bytes (zeroed on disk?) with lines after it: not a crash's torn end"
)
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
    pytest.param(  # no unwritten block: zeros that end before a block's end, lines after them
        line(REX) + b"\0" * 10 + b"\n" + LINE_3,
        2,
        NUL_LINE,
        id="NULs mid-file, not to a block's end",
    ),
    pytest.param(  # a block zeroed by a disk or a repair, more than one write from the end
        MANY[:4096] + bytes(4096) + MANY[8192:],
        MANY[:4096].count(b"\n") + 1,
        NUL_LINE,
        id="a zeroed block further back than a write reaches",
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
    assert str(raised.value) == f"{path}, line {line_number}: {reason}"
    assert digest(path) == before
    # The lock went with the failed open: the same error again, not "in use".
    with pytest.raises(DataFileError, match="line"):
        FileStore(str(path))


@pytest.mark.anyio
async def test_a_file_read_in_short_reads_loads_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file the kernel gives in several reads (Linux: 2 GiB a read at most) loads whole."""
    # A read cut there was taken for a torn tail: the file's last pets were cut off it.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    real_pread = os.pread
    asked: list[tuple[int, int]] = []

    def eleven_bytes_a_read(fd: int, size: int, offset: int) -> bytes:
        asked.append((size, offset))
        return real_pread(fd, min(size, 11), offset)

    with monkeypatch.context() as patch:
        patch.setattr("datafile.os.pread", eleven_bytes_a_read)
        file_store = FileStore(str(path))
    async with serving(file_store) as http:
        listed = await http.get("/v1/pets")
    assert listed.json() == [REX, TOM]
    assert path.read_bytes() == RECORDS
    assert asked[:2] == [(len(RECORDS), 0), (len(RECORDS) - 11, 11)]


def test_a_file_that_ends_before_its_size_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that ends before the file's size is refused, the file untouched, not cut."""
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    real_pread = os.pread

    def ends_at_ten(fd: int, size: int, offset: int) -> bytes:
        return real_pread(fd, min(size, 10 - offset), offset) if offset < 10 else b""

    with monkeypatch.context() as patch, pytest.raises(DataFileError) as raised:
        patch.setattr("datafile.os.pread", ends_at_ten)
        FileStore(str(path))
    assert str(raised.value) == f"{path}: {len(RECORDS)} bytes long, but its end came at byte 10"
    assert path.read_bytes() == RECORDS


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
    assert f"{path}: dropped a torn last record (25 bytes from byte {len(RECORDS)}" in (
        server.stderr
    )
    assert "Traceback" not in server.stderr


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
            patch.setattr("datafile.os.pwrite", no_space)
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
        (record.name, record.levelno)
        for record in caplog.records
        if record.levelno >= logging.WARNING
    ] == [("petstore.store", logging.ERROR)]
    assert "write failed" in caplog.records[-1].getMessage()


@pytest.mark.anyio
async def test_short_write_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that stores part of a record then fails: 503, the part cut off; creates go on."""
    # The store still takes creates under a new id.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    real_pwrite = os.pwrite
    calls: list[int] = []
    file_at_second_call: list[bytes] = []

    def short_then_no_space(fd: int, data: bytes, offset: int) -> int:
        calls.append(offset)
        if len(calls) == 1:
            return real_pwrite(fd, memoryview(data)[:10], offset)
        file_at_second_call.append(path.read_bytes())
        raise os_error(errno.ENOSPC)

    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            patch.setattr("datafile.os.pwrite", short_then_no_space)
            failed = await http.post("/v1/pets", json=WILMA)
        after_failure = path.read_bytes()
        created = await http.post("/v1/pets", json=WILMA)
    assert (failed.status_code, failed.json()) == (
        503,
        storage_unavailable("The data file can't be written: No space left on device"),
    )
    assert calls == [len(RECORDS), len(RECORDS) + 10]  # the second call goes on where it stopped
    assert file_at_second_call == [RECORDS + line({"id": 3, **WILMA})[:10]]
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
            patch.setattr("datafile.os.fdatasync", broken_fdatasync)
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
    stopped = storage_unavailable(
        "The store takes no writes: fsync failed: Input/output error; creates stop until a restart"
    )
    assert [(response.status_code, response.json()) for response in later] == [(503, stopped)] * 3
    assert (ready.status_code, ready.json()) == (503, stopped)
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
@pytest.mark.parametrize("key", [None, "order-7"], ids=["keyless", "keyed"])
@pytest.mark.parametrize("failing", ["fdatasync", "pwrite"])
async def test_a_failed_commit_left_in_the_file_says_it_may_have_been_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str | None, failing: str
) -> None:
    """A failed commit whose lines can't be cut off is a 503 saying it may have been stored."""
    # A write or fsync that fails, and the cut of its lines that fails too (a filesystem gone
    # read-only, a dead disk): the lines may load at the next start, so the 503 says the create may
    # have been stored, and how to retry it (a keyless retry made a second pet, a keyed one a 201
    # for a create it was told had failed). After the restart the pet is there, and a keyed retry is
    # its replay.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    real_pwrite = os.pwrite

    def whole_then_eio(fd: int, data: bytes, offset: int) -> int:
        real_pwrite(fd, data, offset)
        raise os_error(errno.EIO)

    def broken(*args: object) -> None:
        raise os_error(errno.EIO)

    headers = {} if key is None else {"Idempotency-Key": key}
    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            if failing == "fdatasync":
                patch.setattr("datafile.os.fdatasync", broken)
            else:
                patch.setattr("datafile.os.pwrite", whole_then_eio)
            patch.setattr("datafile.os.ftruncate", broken)
            failed = await http.post("/v1/pets", json=WILMA, headers=headers)
    reason = {"fdatasync": "can't be made durable", "pwrite": "can't be written"}[failing]
    maybe = (
        "this create may have been stored: retry it with its Idempotency-Key"
        if key
        else "this create may have been stored: look for it before sending it again (a create"
        " sent with an Idempotency-Key is retried safely)"
    )
    assert (failed.status_code, failed.json()) == (
        503,
        storage_unavailable(f"The data file {reason}: Input/output error; {maybe}"),
    )
    wilma = {"id": 3, **WILMA}
    async with serving(FileStore(str(path))) as http:
        listed = await http.get("/v1/pets")
        retried = await http.post("/v1/pets", json=WILMA, headers=headers)
    assert listed.json() == [REX, TOM, wilma]
    if key is not None:
        assert (retried.status_code, retried.json()) == (201, wilma)
        assert retried.headers["idempotent-replayed"] == "true"


@pytest.mark.anyio
async def test_a_commit_writes_256_kib_at_most_or_one_longer_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queued creates are written WRITE_MAX (256 KiB) at a time, a longer line alone."""
    # So a power cut tears no more than that off the end: zeros further back are damage
    # (records.split_torn_tail), not a torn tail whose lines were never acknowledged.
    path = tmp_path / "pets.jsonl"
    written: list[int] = []
    real_pwrite = os.pwrite

    def counted(fd: int, data: bytes, offset: int) -> int:
        written.append(len(data))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr("datafile.os.pwrite", counted)
    file_store = FileStore(str(path))
    names = ["a" * 100_000, "b" * 100_000, "c" * 100_000, "d" * 400_000, "e"]
    pets = [NewPet(name=name, categoryId=CategoryId(1)) for name in names]
    adds = [asyncio.create_task(file_store.add(pet)) for pet in pets]
    await asyncio.sleep(0)  # each task runs to its wait for the writer, which is not started
    assert len(file_store._pending) == len(names)
    await file_store.open()
    added = await asyncio.gather(*adds)
    await file_store.close()
    lines = [len(line({"id": n, "name": name, "categoryId": 1})) for n, name in enumerate(names, 1)]
    assert written == [lines[0] + lines[1], lines[2], lines[3], lines[4]]
    assert [result.pet.id for result in added] == [1, 2, 3, 4, 5]
    assert path.stat().st_size == sum(lines)


def _zeros_then_lines(reach: int) -> bytes:
    """Whole lines, then NUL bytes from a line's start to a block's end, then whole lines to
    `reach` bytes past the zeros' start."""
    head = MANY[: MANY.index(b"\n", 5000) + 1]
    block_end = -(-len(head) // 4096) * 4096
    filler = reach - (block_end - len(head))
    one = b'{"id":99998,"name":"y","categoryId":1}\n'
    last = one + b'{"id":99999,"name":"' + b"x" * (filler - len(one) - 38) + b'","categoryId":1}\n'
    assert len(last) == filler
    return head + bytes(block_end - len(head)) + last


def test_zeros_within_a_commit_s_reach_of_the_end_are_a_torn_write_further_are_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Zeros within WRITE_MAX of the end are a torn write, dropped; one byte further, damage."""
    # Zeros that start WRITE_MAX bytes from the end at most, a block's end after them, are a power
    # cut's tear of the last commit: dropped, said with how many lines; one byte further, damage:
    # the start stops, the file untouched. No test had held the boundary.
    torn, damaged = tmp_path / "torn.jsonl", tmp_path / "damaged.jsonl"
    torn.write_bytes(_zeros_then_lines(WRITE_MAX))
    damaged.write_bytes(_zeros_then_lines(WRITE_MAX + 1))
    before = digest(damaged)
    with caplog.at_level(logging.WARNING, logger="petstore.store"):
        FileStore(str(torn))
    assert "dropped a torn last write of 2 lines" in caplog.text
    with pytest.raises(DataFileError, match="it holds NUL bytes"):
        FileStore(str(damaged))
    assert digest(damaged) == before


@pytest.mark.anyio
async def test_a_bug_in_the_writer_stops_creates_and_answers_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the writer thread is logged; its creates are answered 503, later ones refused."""
    # An exception the writer thread did not expect is logged with its traceback, its creates
    # answered 503 (they may have been stored) and later ones refused, /readyz 503. The thread died,
    # and every create waited for ever with /readyz 200.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)

    def a_bug(self: FileStore, size: int | None = None) -> str | None:
        raise RuntimeError("a bug")

    keyed = {"Idempotency-Key": "order-9"}
    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            patch.setattr(FileStore, "_changed", a_bug)
            failed = await asyncio.wait_for(http.post("/v1/pets", json=WILMA, headers=keyed), 5)
        later = await asyncio.wait_for(http.post("/v1/pets", json=WILMA), 5)
        # Its key free again: the retry is told the store takes no writes, not 409 in flight.
        keyed_retry = await http.post("/v1/pets", json=WILMA, headers=keyed)
        ready = await http.get("/readyz")
    stopped = "The store takes no writes: the writer failed; creates stop until a restart"
    maybe = "this create may have been stored: retry it with its Idempotency-Key"
    assert (failed.status_code, failed.json()) == (503, storage_unavailable(f"{stopped}; {maybe}"))
    assert (later.status_code, later.json()) == (503, storage_unavailable(stopped))
    assert (keyed_retry.status_code, keyed_retry.json()) == (503, storage_unavailable(stopped))
    assert ready.status_code == 503
    assert any(
        "the writer failed" in record.getMessage() and record.exc_info for record in caplog.records
    )


def _delete(path: Path) -> None:
    path.unlink()


def _replace(path: Path) -> None:  # as an editor saves, or a backup is restored
    copy = path.with_suffix(".new")
    copy.write_bytes(path.read_bytes())
    copy.replace(path)


def _cut(path: Path) -> None:
    with path.open("r+b") as file:
        file.truncate(len(line(REX)))


def _rotate(path: Path) -> None:  # renamed away (still linked), a new file in its place
    path.rename(path.with_suffix(".old"))
    path.write_bytes(RECORDS)


def _append(path: Path) -> None:
    with path.open("ab") as file:
        file.write(line({"id": 9, **WILMA}))


@pytest.mark.anyio
@pytest.mark.parametrize("change", [_delete, _replace, _rotate, _cut, _append])
async def test_a_data_file_changed_under_the_service_stops_creates(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    """A data file changed under the service makes the next create a 503 and stops creates."""
    # Deleted, replaced, cut or written to by another hand while the service runs: the next create
    # is a 503, not a 201 for a pet the path does not hold (lost at the next start, its id given
    # again); creates stop and /readyz is 503 until a restart; the file at the path is left as it
    # was changed.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    async with serving(FileStore(str(path))) as http:
        assert (await http.post("/v1/pets", json=WILMA)).status_code == 201
        change(path)
        left = path.read_bytes() if path.exists() else None
        refused = await http.post("/v1/pets", json=WILMA)
        later = await http.post("/v1/pets", json=WILMA)
        ready = await http.get("/readyz")
        gauge = [
            metric
            for metric in (await http.get("/metrics")).text.splitlines()
            if metric.startswith("petstore_store_writable ")
        ]
    assert refused.status_code == 503
    assert refused.json()["code"] == "storage_unavailable"
    assert "creates stop until a restart" in refused.json()["message"]
    assert (later.status_code, ready.status_code) == (503, 503)
    assert gauge == ["petstore_store_writable 0.0"]
    assert (path.read_bytes() if path.exists() else None) == left


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("directory_mode", "group_writes"),
    [(0o2775, True), (0o2770, True), (0o755, False), (0o775, False), (0o1777, False)],
)
async def test_a_new_data_file_is_writable_by_the_group_when_its_directory_is(
    tmp_path: Path, directory_mode: int, group_writes: bool
) -> None:
    """A new data file is writable by the group in a directory the group shares, elsewhere not."""
    # A directory a group shares: setgid, writable by the group, not by all, as the image's /data
    # (group 0 for OpenShift's arbitrary uids): the next start, another uid of the group, opens the
    # file. Elsewhere (/tmp too) the file is its maker's, as the umask has it.
    directory = tmp_path / "data"
    directory.mkdir()
    directory.chmod(directory_mode)
    store = FileStore(str(directory / "pets.jsonl"))
    await store.close()
    mode = (directory / "pets.jsonl").stat().st_mode
    assert bool(mode & stat.S_IWGRP) is group_writes
    assert not mode & stat.S_IWOTH


@pytest.mark.anyio
async def test_a_new_data_file_named_by_a_symlink_is_made_durable_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data file made through a symlink: its own directory is synced and its group looked at."""
    # The symlink's directory was synced: after a power cut, the file's name could be gone.
    real, linked = tmp_path / "real", tmp_path / "linked"
    real.mkdir()
    linked.mkdir()
    real.chmod(0o2770)  # a directory its group shares: the file is the group's to write too
    (linked / "pets.jsonl").symlink_to(real / "pets.jsonl")
    real_fsync = os.fsync
    synced: list[str] = []

    def noted_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    with monkeypatch.context() as patch:
        patch.setattr("datafile.os.fsync", noted_fsync)
        store = FileStore(str(linked / "pets.jsonl"))
    await store.close()
    assert synced == [str(real)]
    assert (real / "pets.jsonl").stat().st_mode & stat.S_IWGRP


async def create_with_and_without(
    path: Path, monkeypatch: pytest.MonkeyPatch, name: str, stand_in: Callable[..., Any]
) -> tuple[httpx.Response, httpx.Response]:
    """A create with the data file's `os.<name>` replaced by `stand_in`, then one as usual."""
    async with serving(FileStore(str(path))) as http:
        with monkeypatch.context() as patch:
            patch.setattr(f"datafile.os.{name}", stand_in)
            first = await http.post("/v1/pets", json=WILMA)
        return first, await http.post("/v1/pets", json=WILMA)


@pytest.mark.anyio
async def test_a_data_file_moved_away_during_a_commit_keeps_none_of_its_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data file moved away in a commit: the create is a 503, its line cut off; creates stop."""
    # Renamed away (a rotation) between a commit's write and the end of its fdatasync: the line is
    # cut off the file it went to, so that no 503's pet is anywhere.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    rotated = tmp_path / "pets.jsonl.1"
    real_fdatasync = os.fdatasync

    def rotating_fdatasync(fd: int) -> None:
        if not rotated.exists():
            path.rename(rotated)
        real_fdatasync(fd)

    refused, later = await create_with_and_without(
        path, monkeypatch, "fdatasync", rotating_fdatasync
    )
    assert (refused.status_code, later.status_code) == (503, 503)
    assert "deleted or moved away" in refused.json()["message"]
    assert rotated.read_bytes() == RECORDS
    assert not path.exists()


@pytest.mark.anyio
async def test_a_check_of_the_data_file_that_fails_is_no_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A failing stat of the data file gives a warning and the create is made as usual."""
    # A stat of the path that fails otherwise than "not found" (an NFS hiccup) says nothing of the
    # file; creates go on.
    path = tmp_path / "pets.jsonl"
    path.write_bytes(RECORDS)
    real_stat = os.stat

    def failing_stat(target: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(target) == str(path):
            raise os_error(errno.EIO)
        return real_stat(target, *args, **kwargs)

    created, later = await create_with_and_without(path, monkeypatch, "stat", failing_stat)
    assert (created.status_code, later.status_code) == (201, 201)
    assert path.read_bytes() == RECORDS + line({"id": 3, **WILMA}) + line({"id": 4, **WILMA})
    assert any("cannot check the data file" in record.getMessage() for record in caplog.records)


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
    assert str(raised.value) == f"{path}: in use by another petstore process"
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
    pytest.param(b"", "not a JSON array of pets: it is empty", id="empty"),
    pytest.param(
        b'[{"name": "Rex", "categoryId": 1}',
        "not a JSON array of pets: Input data was truncated",
        id="not JSON",
    ),
    pytest.param(  # the syntax, not the wrong type met before it (as in a body)
        b'[{"name": "a", "categoryId": "1"}, {"name": "b",',
        "not a JSON array of pets: Input data was truncated",
        id="not JSON after a wrong type",
    ),
    pytest.param(
        b"[" * 5000 + b"]" * 5000,
        "not a JSON array of pets: nested too deeply to read",
        id="nested too deeply",
    ),
    pytest.param(
        b'{"name": "Rex", "categoryId": 1}',
        "not a JSON array of pets: Expected an array, got an object",
        id="not an array",
    ),
    pytest.param(
        b'[{"name": "Rex", "categoryId": 1, "color": "red"}]',
        "not a JSON array of pets: $[0]: object contains unknown field `color`",
        id="unknown field",
    ),
    pytest.param(
        b'[{"id": 5, "name": "Rex", "categoryId": 1}, {"id": 5, "name": "Tom", "categoryId": 2}]',
        "item 1: id 5 is not above the id 5 before it",
        id="ids not increasing",
    ),
    pytest.param(
        b'[{"id": 0, "name": "Rex", "categoryId": 1}]',
        "not a JSON array of pets: $[0].id: expected an integer >= 1",
        id="id zero",
    ),
    pytest.param(
        b'[{"id": 2.5, "name": "Rex", "categoryId": 1}]',
        "not a JSON array of pets: $[0].id: expected an integer, got a number",
        id="id with a fraction",
    ),
    pytest.param(None, "cannot read: No such file or directory", id="missing file"),
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
    """A bad seed file stops the start: exit 2, one `petstore: seed file ...` line, no data file."""
    # The line is on stderr.
    seed_path = tmp_path / "seed.json"
    if content is not None:
        seed_path.write_bytes(content)
    args = ["--seed", str(seed_path)]
    if store_option == "data file":
        args += ["--data", str(tmp_path / "pets.jsonl")]
    server = start_server(*args, wait=False)
    assert server.process.wait(15) == 2
    assert server.stderr == f"petstore: seed file {seed_path}: {reason}\n"
    assert server.stdout == ""
    assert not (tmp_path / "pets.jsonl").exists()


def test_a_seed_counts_integers_as_json_schema_does() -> None:
    """`2.0` and `1e1` are integers in a seed file, ids and categories, stored as plain ints."""
    # As in a body.
    seed = seed_decoder.decode(
        b'[{"id": 2.0, "name": "Rex", "categoryId": 1.0},'
        b' {"id": 1e1, "name": "Tom", "categoryId": 2}]'
    )
    pets = seed_pets(seed, last_id=0)
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
