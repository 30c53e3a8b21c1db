"""The data file: pets in an append-only JSON Lines file, durable before each 201 (FileStore)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from idempotency import IdempotencyKeys
from metrics import Histogram
from records import WRITE_MAX, DataFileError, KeyedRecord, parse_records, split_torn_tail
from schemas import INT64_MAX, NewPet, Pet, SeedPet, encoder, stored_pet
from store import (
    IDS_EXHAUSTED,
    Added,
    IndexedReads,
    PetIndex,
    ResetUnavailable,
    StorageUnavailable,
    may_have_been_stored,
    seed_pets,
)

logger = logging.getLogger("petstore.store")


def _write_all(fd: int, data: bytes, offset: int) -> None:
    """pwrite until all of `data` is at `offset`: a short write goes on where it stopped."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        if written == 0:
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[written:]
        offset += written


def _commit_end(sizes: Sequence[int]) -> int:
    """How many of the lines of these sizes the next commit writes (one at least): as many as
    fit in WRITE_MAX bytes, so that a power cut mid-write tears off no more than that
    (records.split_torn_tail)."""
    total = 0
    for end, size in enumerate(sizes):
        total += size
        if total > WRITE_MAX and end:
            return end
    return len(sizes)


# What one read asks for at most: Linux reads at most 0x7ffff000 bytes a call (2 GiB - 4 KiB),
# and a read cut there was taken for a crash's torn tail: a file of 2.2 GB lost its last pets.
_READ_AT_ONCE: Final = 1 << 30


def _read_whole(fd: int, path: str) -> bytes:
    """The whole file, read a piece at a time (one piece, the same object, under 1 GiB)."""
    size = os.fstat(fd).st_size
    pieces, offset = [], 0
    while offset < size:
        piece = os.pread(fd, min(size - offset, _READ_AT_ONCE), offset)
        if not piece:  # shortened meanwhile, by no petstore (the file is locked)
            raise DataFileError(f"{path}: {size} bytes long, but its end came at byte {offset}")
        pieces.append(piece)
        offset += len(piece)
    return b"".join(pieces)


def _fsync_directory(path: str) -> None:
    """Make a new file's name durable: its directory's, the one a symlink named points into."""
    fd = os.open(os.path.dirname(os.path.realpath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _writable_by_the_group_if_its_directory_is(fd: int, path: str) -> None:
    """A new data file may be written by its group in a directory shared by a group (setgid,
    writable by the group, not by all): the image's /data, group 0's for OpenShift's arbitrary
    uids, where a file only its maker could write stopped the next start under another uid."""
    mode = os.stat(os.path.dirname(os.path.realpath(path))).st_mode
    if mode & stat.S_ISGID and mode & stat.S_IWGRP and not mode & stat.S_IWOTH:
        os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | stat.S_IRGRP | stat.S_IWGRP)


class _Failed(NamedTuple):
    """Why a group commit's creates are refused; `maybe_stored`: its lines could not be cut
    off the file after a failed write or fsync, and may load at the next start."""

    reason: str
    maybe_stored: bool = False


@dataclass(slots=True)
class _Write:
    pet: Pet
    line: bytes
    done: asyncio.Future[Pet]
    key: str | None = None  # the create's Idempotency-Key, made durable in the same line
    made_at: int = 0  # seconds since the epoch, for a keyed create


class FileStore(IndexedReads):
    """Pets in a JSON Lines file, one record a line (records.py), appended and fsynced before a
    create returns.

    One writer thread takes the creates queued since its last write (WRITE_MAX bytes of them,
    or one longer line) and commits them with one write and one fsync (group commit). Pets
    reach the index only once durable, so a read never shows a pet that a crash could take
    back. A failed fsync stops creates until a restart reloads the file: after it, the page
    cache can't be trusted.
    """

    def __init__(self, path: str) -> None:
        """Open, lock and load the file; raises DataFileError, leaving the file untouched."""
        self.path = path
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._index = PetIndex()
        self._keys = IdempotencyKeys()
        self._pending: list[_Write] = []
        self._pending_bytes = 0  # of their lines: split in commits only past WRITE_MAX
        self._closing = False
        self._failure: str | None = None
        self._writer: threading.Thread | None = None
        # For the metrics, read as they are at scrape time; only the writer thread writes them.
        self.sync_durations = Histogram()
        self.write_errors = 0
        self._fd = self._open_locked(path)
        try:
            # The file at the path, by a stat of the path as _changed takes it (on overlayfs
            # an fstat of the open file may give another st_dev).
            opened = os.stat(path)
            self._identity = (opened.st_dev, opened.st_ino)
            self._size = self._load()
        except BaseException:
            os.close(self._fd)
            raise
        self._next_id = self._index.last_id + 1

    @staticmethod
    def _open_locked(path: str) -> int:
        existed = os.path.exists(path)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise DataFileError(f"{path}: cannot open: {error.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO, a device: no offsets to read at
            os.close(fd)
            raise DataFileError(f"{path}: not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise DataFileError(f"{path}: in use by another petstore process") from None
        if not existed:
            _writable_by_the_group_if_its_directory_is(fd, path)
            _fsync_directory(path)
        return fd

    def _load(self) -> int:
        data = _read_whole(self._fd, self.path)
        end = split_torn_tail(data)
        loaded = parse_records(self.path, data[:end])
        if (twice := self._keys.load(loaded.keys)) is not None:  # before the file is touched
            key, pet, _ = loaded.keys[twice]
            raise DataFileError(
                f"{self.path}, line {loaded.pets.index(pet) + 1}: idempotency key {key!r} is "
                "used by an earlier line"
            )
        if end < len(data):
            lines = data.count(b"\n", end)  # more than one: a group commit's, from its zeros on
            logger.warning(
                "%s: dropped %s (%d bytes from byte %d: %r)",
                self.path,
                "a torn last record" if lines <= 1 else f"a torn last write of {lines} lines",
                len(data) - end,
                end,
                data[end : end + 60],
            )
            os.ftruncate(self._fd, end)
            os.fsync(self._fd)
        self._index.extend(loaded.pets)
        return end

    def seed(self, pets: Sequence[SeedPet]) -> bool:
        with self._lock:
            if len(self._index):
                return False
            chosen = seed_pets(pets, self._index.last_id)
            self._commit_now(chosen)
            self._next_id = self._index.last_id + 1
        return True

    def _commit_now(self, pets: list[Pet]) -> None:
        """Write and fsync before serving (caller holds the lock), in one write: a start killed
        during it most likely leaves a torn last line, which the next start drops saying so
        (written a commit's WRITE_MAX at a time, a partial seed loaded in silence)."""
        data = b"".join(encoder.encode(pet) + b"\n" for pet in pets)
        try:
            _write_all(self._fd, data, self._size)
            os.fdatasync(self._fd)
        except OSError as error:
            os.ftruncate(self._fd, self._size)
            raise DataFileError(f"{self.path}: cannot write: {error.strerror}") from None
        self._size += len(data)
        for pet in pets:
            self._index.append(pet)

    def reset(self) -> int:
        raise ResetUnavailable(
            "Only the in-memory store can be reset: pets in a data file are never deleted"
        )

    async def open(self) -> None:
        self._writer = threading.Thread(target=self._write_loop, name="petstore-writer")
        self._writer.start()

    async def close(self) -> None:
        with self._lock:
            self._closing = True
            self._wakeup.notify()
        if self._writer is not None:
            await asyncio.to_thread(self._writer.join)
        os.close(self._fd)  # also lets go of the lock

    @property
    def unwritable(self) -> str | None:
        return self._failure or (IDS_EXHAUSTED if self._next_id > INT64_MAX else None)

    async def add(self, new_pet: NewPet, idempotency_key: str | None = None) -> Added:
        done: asyncio.Future[Pet] = asyncio.get_running_loop().create_future()
        with self._lock:
            # A replay is a read: it is answered even while the store takes no writes.
            if idempotency_key is not None and (made := self._keys.claim(idempotency_key, new_pet)):
                return Added(made, replayed=True)
            if (refused := self.unwritable) is not None:
                if idempotency_key is not None:
                    self._keys.release(idempotency_key)
                raise StorageUnavailable(refused)
            pet = stored_pet(self._next_id, new_pet)
            self._next_id += 1  # taken for good, even if this write fails
            if idempotency_key is None:
                write = _Write(pet, encoder.encode(pet) + b"\n", done)
            else:
                made_at = int(time.time())
                record = KeyedRecord(pet=pet, idempotencyKey=idempotency_key, keyedAt=made_at)
                write = _Write(pet, encoder.encode(record) + b"\n", done, idempotency_key, made_at)
            self._pending.append(write)
            self._pending_bytes += len(write.line)
            self._wakeup.notify()
        return Added(await done)

    # The writer thread.

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closing:
                    self._wakeup.wait()
                if not self._pending:
                    return
                if self._pending_bytes <= WRITE_MAX:  # as good as always: all of them
                    batch, self._pending, self._pending_bytes = self._pending, [], 0
                else:
                    end = _commit_end([len(write.line) for write in self._pending])
                    batch, self._pending = self._pending[:end], self._pending[end:]
                    self._pending_bytes -= sum(len(write.line) for write in batch)
                failure = self._failure
            try:
                failed = self._commit(batch, failure)
            except Exception:  # a bug: said, and creates stop (the lines may be in the file)
                logger.exception("%s: the writer failed", self.path)
                failed = _Failed(self._fail("the writer failed"), maybe_stored=True)
                with self._lock:
                    for write in batch:
                        if write.key is not None:
                            self._keys.release(write.key)
            self._settle(batch, failed)

    def _commit(self, batch: list[_Write], failure: str | None) -> _Failed | None:
        """Append the batch's lines (unless creates have stopped for `failure`), then show its
        pets and remember their keys, or free the keys again; why it failed, if it did."""
        failed = _Failed(failure) if failure is not None else None
        if failed is None:
            failed = self._append(b"".join(write.line for write in batch))
        with self._lock:
            for write in batch:
                if failed is None:
                    self._index.append(write.pet)
                if write.key is not None:  # remembered with its pet, or free again
                    if failed is None:
                        self._keys.remember(write.key, write.pet, write.made_at)
                    else:
                        self._keys.release(write.key)
        return failed

    def _append(self, data: bytes) -> _Failed | None:
        """Write and fsync `data`; on failure cut it off again and say what went wrong."""
        # Nothing is written to a file changed since the last commit (one cut stays loadable).
        if (changed := self._changed(self._size)) is not None:
            return _Failed(self._fail(changed))
        try:
            _write_all(self._fd, data, self._size)
        except OSError as error:
            self.write_errors += 1
            logger.error("%s: write failed: %s", self.path, error)
            reason = f"The data file can't be written: {error.strerror}"
            return _Failed(reason, maybe_stored=not self._cut_back())
        try:
            self._fdatasync()  # an append's new size is flushed with the data
        except OSError as error:
            self.write_errors += 1
            # After a failed fsync the kernel may have dropped the dirty pages and cleared the
            # error: nothing written since can be trusted, so creates stop until a restart.
            self._fail(f"fsync failed: {error.strerror}")
            reason = f"The data file can't be made durable: {error.strerror}"
            return _Failed(reason, maybe_stored=not self._cut_back())
        # Moved away while we wrote: our lines are not at the path, and are cut off again.
        if (changed := self._changed()) is not None:
            self._cut_back()
            return _Failed(self._fail(changed))
        self._size += len(data)
        return None

    def _changed(self, size: int | None = None) -> str | None:
        """How the file at the data file's path is no longer the one we write, as we left it
        (`size` bytes, if given), if it is not: deleted, replaced (an editor's save, a restore,
        a rotation), cut or written by another hand. Writes to it would get 201s for pets the
        path does not hold (gone at the next start, their ids given again); a second process
        could even lock the new file at the path and hand out the same ids. One stat of the
        path (bench/commit_checks.py). A stat that fails otherwise tells nothing: a warning."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return "the data file was deleted or moved away"
        except OSError as error:
            logger.warning("%s: cannot check the data file: %s", self.path, error.strerror)
            return None
        if (now.st_dev, now.st_ino) != self._identity:
            return "the data file was replaced: another file is at its path"
        if size is not None and now.st_size != size:
            return f"the data file was changed by another hand ({now.st_size} bytes, not {size})"
        return None

    def _fdatasync(self) -> None:
        """fdatasync, timed for the metrics (a failed one too: a slow failure is news)."""
        started = time.perf_counter()
        try:
            os.fdatasync(self._fd)
        finally:
            self.sync_durations.observe(time.perf_counter() - started)

    def _cut_back(self) -> bool:
        """Cut what the last commit wrote off the file again, durably; whether that was done
        (if not, its lines may load at the next start: creates stop)."""
        try:
            os.ftruncate(self._fd, self._size)
            os.fsync(self._fd)
        except OSError as error:
            self._fail(f"cannot cut a failed write off: {error.strerror}")
            return False
        return True

    def _fail(self, reason: str) -> str:
        """Stop creates until a restart, for this reason; what the creates refused are told."""
        reason += "; creates stop until a restart"
        logger.error("%s: %s", self.path, reason)
        with self._lock:
            self._failure = f"The store takes no writes: {reason}"
        return self._failure

    @staticmethod
    def _settle(batch: list[_Write], failed: _Failed | None) -> None:
        def settle() -> None:
            for write in batch:
                if write.done.done():  # the client went away; the pet is stored all the same
                    continue
                if failed is None:
                    write.done.set_result(write.pet)
                elif failed.maybe_stored:
                    write.done.set_exception(may_have_been_stored(failed.reason, write.key))
                else:
                    write.done.set_exception(StorageUnavailable(failed.reason))

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            batch[0].done.get_loop().call_soon_threadsafe(settle)
