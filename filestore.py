"""The data file store: pets in an append-only JSON Lines file, fsynced before each 201."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Final, NamedTuple

import msgspec

import schemas
from schemas import IDEMPOTENCY_KEY_MAX, NewPet, Pet, encoder, pet_decoder, stored_pet
from store import IDS_EXHAUSTED, MemoryStore, ResetUnavailable, StorageUnavailable

logger = logging.getLogger("petstore")


class DataFileError(Exception):
    """The data file can't be used; the one-line text names the file (and the line) and why."""


class KeyedLine(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A keyed create's line: pet, Idempotency-Key and Unix time (a keyless create's is a Pet)."""

    pet: Pet
    idempotencyKey: Annotated[str, msgspec.Meta(max_length=IDEMPOTENCY_KEY_MAX, pattern="^[!-~]+$")]
    keyedAt: Annotated[int, msgspec.Meta(ge=0)]


_keyed_decoder: Final = msgspec.json.Decoder(KeyedLine)


def _decode_line(name: str, number: int, line: bytes) -> Pet | KeyedLine:
    """A line as a Pet or a KeyedLine; else DataFileError, worded for the one it looks like."""
    try:
        if b'"pet"' in line:  # a keyed line, or a Pet named "pet"
            with contextlib.suppress(msgspec.ValidationError):
                return pet_decoder.decode(line)
            return _keyed_decoder.decode(line)
        return pet_decoder.decode(line)
    except UnicodeDecodeError:
        reason = "invalid UTF-8"
    except msgspec.DecodeError as error:  # a ValidationError too
        reason = "the line is empty" if not line.strip() else schemas.in_json_words(str(error))
    raise DataFileError(f"{name}, line {number}: not a Pet: {reason}")


def _decode(name: str, data: bytes) -> tuple[list[Pet], list[KeyedLine]]:
    """The pets of whole lines and the keyed lines; else DataFileError naming the first bad line."""
    # decode_lines skips blank lines and takes two values on one line: the count finds those.
    with contextlib.suppress(msgspec.DecodeError, UnicodeDecodeError):
        if len(pets := pet_decoder.decode_lines(data)) == data.count(b"\n"):
            return pets, []
    records = [_decode_line(name, n, line) for n, line in enumerate(data.split(b"\n")[:-1], 1)]
    pets = [record.pet if isinstance(record, KeyedLine) else record for record in records]
    return pets, [record for record in records if isinstance(record, KeyedLine)]


def _open_locked(path: str) -> int:
    """Open (or make) the data file and lock it; the lock of a killed owner went with it."""
    directory = os.path.dirname(os.path.realpath(path))
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise DataFileError(f"data file {path}: cannot open: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device would hang the load
        os.close(fd)
        raise DataFileError(f"data file {path}: not a regular file")
    if os.stat(directory).st_mode & stat.S_IWGRP:  # the group may run the next process
        os.fchmod(fd, os.fstat(fd).st_mode | stat.S_IWGRP)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise DataFileError(f"data file {path}: in use by another petstore process") from None
    # The file's name must be durable too (it may be new), or a power cut could take its pets.
    directory_fd = os.open(directory, os.O_RDONLY)
    os.fsync(directory_fd)
    os.close(directory_fd)
    return fd


class _Create(NamedTuple):
    pet: Pet
    line: bytes
    keyed: KeyedLine | None
    done: asyncio.Future[Pet]


def _settle(batch: list[_Create], failure: str | None) -> None:
    """Answer a commit's creates (on their event loop); a create whose client left is skipped."""
    for create in (create for create in batch if not create.done.done()):
        if failure is None:
            create.done.set_result(create.pet)
        else:
            create.done.set_exception(StorageUnavailable(failure))


class FileStore(MemoryStore):
    """A MemoryStore backed by a JSON Lines file: a writer thread group-commits the creates."""

    def __init__(
        self,
        path: str,
        seed: Sequence[Pet] = (),
        *,
        on_sync: Callable[[float], None] = lambda seconds: None,
        on_write_error: Callable[[], None] = lambda: None,
    ) -> None:
        """Open, lock and load the file (seeding it when empty); DataFileError says why not."""
        super().__init__()
        self.seed = list(seed)  # a new tenant's start; the file's own pets come from the file
        self.path, self.name = path, f"data file {path}"
        self.on_sync, self.on_write_error = on_sync, on_write_error
        self.wakeup = threading.Condition(self.lock)
        self.queue: list[_Create] = []
        self.closing = False
        self.failure: str | None = None
        self.writer = threading.Thread(target=self._write_loop, name="petstore-writer", daemon=True)
        self.fd = _open_locked(path)
        try:
            pets = self._load()
            if not pets and seed:  # a new file: the seed is its first lines, durable at once
                pets = list(seed)
                if failed := self._append(encoder.encode_lines(pets)):
                    raise DataFileError(f"{self.name}: cannot write the seed: {failed}")
        except BaseException:
            os.close(self.fd)
            raise
        self.index.extend(pets)
        self.next_id = self.index.last_id + 1

    def _load(self) -> list[Pet]:
        """Read the whole file strictly and cut a torn last record off it, saying so."""
        with open(self.path, "rb") as file:  # read() loops: one read(2) stops at 2 GiB
            data = file.read()
        end = data.rfind(b"\n") + 1  # a crash mid-append leaves a line without its newline
        last_line = data.rfind(b"\n", 0, end - 1) + 1
        if b"\0" in data[last_line:end]:  # or zeros where the file grew before its data landed
            end = last_line
        pets, keyed = _decode(self.name, data[:end])
        for number, (before, pet) in enumerate(itertools.pairwise(pets), 2):
            if pet.id <= before.id:
                reason = f"id {pet.id} is not above the id {before.id} before it"
                raise DataFileError(f"{self.name}, line {number}: {reason}")
        for record in keyed:
            self.keys.remember(record.idempotencyKey, record.pet, record.keyedAt)
        if end < len(data):
            torn = f"{len(data) - end} bytes from byte {end}"
            logger.warning("%s: dropped a torn last record (%s)", self.name, torn)
            os.ftruncate(self.fd, end)
            os.fsync(self.fd)
        self.size = end
        return pets

    async def open(self) -> None:
        self.writer.start()

    async def close(self) -> None:
        with self.lock:
            self.closing = True
            self.wakeup.notify()
        if self.writer.is_alive():
            await asyncio.to_thread(self.writer.join)
        os.close(self.fd)  # which lets go of the lock

    def reset(self) -> int:
        raise ResetUnavailable("Only the in-memory store can be reset: pets in a data file stay")

    @property
    def unwritable(self) -> str | None:
        return self.failure or (IDS_EXHAUSTED if self.next_id > schemas.INT64_MAX else None)

    async def add(self, new_pet: NewPet, key: str | None = None) -> tuple[Pet, bool]:
        done: asyncio.Future[Pet] = asyncio.get_running_loop().create_future()
        with self.lock:
            if (made := self.claim(new_pet, key)) is not None:
                return made, True
            pet = stored_pet(self.next_id, new_pet)
            self.next_id += 1  # taken for good, even if its write fails
            keyed = None if key is None else KeyedLine(pet, key, int(time.time()))
            line = encoder.encode(pet if keyed is None else keyed) + b"\n"
            self.queue.append(_Create(pet, line, keyed, done))
            self.wakeup.notify()
        return await done, False

    def _write_loop(self) -> None:
        while True:
            with self.lock:
                self.wakeup.wait_for(lambda: self.queue or self.closing)
                if not self.queue:
                    return
                batch, self.queue = self.queue, []
            try:  # only this thread sets self.failure
                failure = self.failure or self._append(b"".join(create.line for create in batch))
            except Exception:  # a bug: said, and creates stop rather than wait for ever
                logger.exception("%s: the writer failed", self.name)
                failure = self._stop("the writer failed")
            with self.lock:
                if failure is None:
                    self.index.extend([create.pet for create in batch])
                for keyed in (create.keyed for create in batch if create.keyed is not None):
                    if failure is None:
                        self.keys.remember(keyed.idempotencyKey, keyed.pet, keyed.keyedAt)
                    else:
                        self.keys.release(keyed.idempotencyKey)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                batch[0].done.get_loop().call_soon_threadsafe(_settle, batch, failure)

    def _append(self, data: bytes) -> str | None:
        """Append `data` and fdatasync it; None, or why not (then `data` is cut off again)."""
        try:
            if os.pwrite(self.fd, data, self.size) != len(data):
                raise OSError(errno.EIO, "a short write")
        except OSError as error:
            return self._cut(f"The data file can't be written: {error.strerror}")
        started = time.perf_counter()
        try:
            os.fdatasync(self.fd)  # an append's new size is flushed with its data
        except OSError as error:
            self._stop(f"fsync failed: {error.strerror}")  # "fsyncgate": dirty pages may be lost
            return self._cut(f"The data file can't be made durable: {error.strerror}")
        finally:
            self.on_sync(time.perf_counter() - started)
        self.size += len(data)
        return None

    def _cut(self, reason: str) -> str:
        """Say why a commit failed and cut what it wrote off the file; the reason."""
        logger.error("%s: %s", self.name, reason)
        self.on_write_error()
        try:
            os.ftruncate(self.fd, self.size)
            os.fsync(self.fd)
        except OSError as error:  # its lines could load at the next start: no line after them
            self._stop(f"cannot cut a failed write off: {error.strerror}")
        return reason

    def _stop(self, reason: str) -> str:
        """Stop taking creates until a restart, saying why; what refused creates are told."""
        self.failure = f"The store takes no writes: {reason}; creates stop until a restart"
        logger.error("%s: %s", self.name, self.failure)
        return self.failure
