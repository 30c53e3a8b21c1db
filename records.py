"""The data file's records: a Pet or a KeyedRecord a line, loaded strictly (DataFileError)."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Final

import msgspec

from schemas import IDEMPOTENCY_KEY_MAX, Pet, in_json_words, is_idempotency_key, pet_decoder


class DataFileError(Exception):
    """The data file can't be used; the text names the file (and the line) and says why."""


# The most one commit writes (datafile.FileStore takes the creates queued that fit, one at
# least): a power cut tears no more than that off the file's end, or one longer line. A
# commit of 32 clients' creates is some 2 KiB.
WRITE_MAX: Final = 256 * 1024
_BLOCK: Final = 4096  # the filesystem's block, as the page cache writes it back


def split_torn_tail(data: bytes) -> int:
    """Where the whole records end. A crash mid-append leaves a line without its newline, or
    zeros where the filesystem grew the file before the data landed; both are dropped.

    The zeros may be followed by whole lines: a group commit's write spans blocks, and after a
    power cut one block may have landed and the one before it not. So zeros that run to a
    block's end (or the file's) start the torn tail, whatever follows them, if they are within
    the last write's reach of the end (WRITE_MAX): no fdatasync completed after that write (it
    would have written them), so none of it was acknowledged. Zeros further back (a block
    zeroed by a disk, or by a repair) and zeros ending elsewhere are damage, as any other:
    lines acknowledged after them follow (msgspec writes NUL as \\u0000). Zeros in the last
    line are its tear, however long it is (a line longer than WRITE_MAX was written alone)."""
    end = data.rfind(b"\n") + 1
    last_line_start = data.rfind(b"\n", 0, end - 1) + 1
    zero = data.find(b"\0")
    if zero >= 0 and zero < last_line_start:
        after = len(data) - len(data[zero:].lstrip(b"\0"))  # where the zeros end
        if len(data) - zero <= WRITE_MAX and (after == len(data) or after % _BLOCK == 0):
            return data.rfind(b"\n", 0, zero) + 1
    if end and b"\0" in data[last_line_start:end]:
        return last_line_start
    return end


_CHUNK = 1 << 20  # bytes of records decoded at a time: a million lines never sit in memory


class KeyedRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """The line of a create made with an Idempotency-Key: the pet, its key and when it was made
    (seconds since the epoch), so that the key is durable in the same write as its pet and a
    retry after a restart or a crash replays it. A create without a key is a plain Pet line."""

    pet: Pet
    idempotencyKey: str  # checked by _check_keys, all at once: a pattern a line costs 1 us
    keyedAt: Annotated[int, msgspec.Meta(ge=0)]


_keyed_decoder: Final = msgspec.json.Decoder(KeyedRecord)
# How the service writes a keyed line: the file's lines are told apart by it, at first.
_KEYED_START: Final = b'{"pet":'
Record = Pet | KeyedRecord


def _decode(line: bytes) -> Record:
    """A line as a Pet or a KeyedRecord, whatever its members' order and spacing (a fixture's
    JSON library may sort them: such a line stopped the start as "not a Pet");
    else the error of the kind it looks like, a KeyedRecord if it has a `"pet"`."""
    if line.startswith(_KEYED_START):
        return _keyed_decoder.decode(line)
    try:
        return pet_decoder.decode(line)
    except msgspec.ValidationError as not_a_pet:
        try:
            return _keyed_decoder.decode(line)
        except msgspec.ValidationError as not_keyed:
            raise (not_keyed if b'"pet"' in line else not_a_pet) from None


_PET: Final = operator.attrgetter("pet")
_KEY_ENTRY: Final = operator.attrgetter("idempotencyKey", "pet", "keyedAt")
_ID: Final = operator.attrgetter("id")


@dataclass(slots=True)
class Loaded:
    """What a data file holds: its pets in order, and its keyed creates' (key, pet, second)."""

    pets: list[Pet]
    keys: list[tuple[str, Pet, int]]


def _why_not(line: bytes, error: msgspec.DecodeError | UnicodeDecodeError) -> str:
    """Why a line is no record, in words."""
    if not line.strip():  # msgspec says "Input data was truncated"
        return "the line is empty"
    if isinstance(error, UnicodeDecodeError):
        return "invalid UTF-8"
    if b"\0" in line:  # msgspec says "invalid character (byte 0)"
        return "it holds NUL bytes (zeroed on disk?) with lines after it: not a crash's torn end"
    return in_json_words(str(error))


def parse_records(path: str, records: bytes) -> Loaded:
    """Every line a Pet or a KeyedRecord, ids strictly increasing; else DataFileError naming
    the line. A file written before keys existed is all Pet lines, and loads as it did. Loading
    a million lines is mostly C: whole chunks through one decoder, attrgetters, maps."""
    loaded = Loaded([], [])
    start = 0
    while start < len(records):
        end = records.find(b"\n", start + _CHUNK) + 1 or len(records)
        chunk = records[start:end]
        lines = chunk.split(b"\n")[:-1]
        keyed = chunk.count(b"\n" + _KEYED_START) + chunk.startswith(_KEYED_START)
        pets_before, keys_before = len(loaded.pets), len(loaded.keys)
        try:
            if keyed == 0:  # the fast ways: one decoder over a chunk of one kind of line
                loaded.pets += map(pet_decoder.decode, lines)
            elif keyed == len(lines):
                parsed = list(map(_keyed_decoder.decode, lines))
                loaded.pets += map(_PET, parsed)
                loaded.keys += map(_KEY_ENTRY, parsed)
            else:
                for record in map(_decode, lines):
                    if type(record) is KeyedRecord:
                        loaded.pets.append(record.pet)
                        loaded.keys.append(_KEY_ENTRY(record))
                    else:
                        # mypy narrows on isinstance, not on `type() is` (a call less a line)
                        loaded.pets.append(record)  # type: ignore[arg-type]
        except (msgspec.DecodeError, UnicodeDecodeError):  # line by line: written by hand?
            del loaded.pets[pets_before:], loaded.keys[keys_before:]
            for number, line in enumerate(lines, start=records.count(b"\n", 0, start) + 1):
                try:
                    record = _decode(line)
                except (msgspec.DecodeError, UnicodeDecodeError) as error:
                    reason = _why_not(line, error)
                    raise DataFileError(f"{path}, line {number}: not a Pet: {reason}") from None
                if isinstance(record, KeyedRecord):
                    loaded.pets.append(record.pet)
                    loaded.keys.append(_KEY_ENTRY(record))
                else:
                    loaded.pets.append(record)
        start = end
    _check_ids(path, loaded.pets)
    _check_keys(path, loaded)
    return loaded


def _check_keys(path: str, loaded: Loaded) -> None:
    """Every key 1 to IDEMPOTENCY_KEY_MAX visible ASCII characters (schemas.is_idempotency_key,
    as a request's Idempotency-Key must be); else DataFileError naming the line. The common
    case is the same checks as C-level passes over all the keys at once, not a call a key."""
    keys = list(map(operator.itemgetter(0), loaded.keys))
    every = "".join(keys)
    if not keys or (
        every.isascii()
        and every.isprintable()
        and " " not in every
        and min(map(len, keys)) >= 1
        and max(map(len, keys)) <= IDEMPOTENCY_KEY_MAX
    ):
        return
    for key, pet, _ in loaded.keys:
        if not is_idempotency_key(key):
            raise DataFileError(
                f"{path}, line {loaded.pets.index(pet) + 1}: not a Pet: idempotency key "
                f"{key!r} is not 1 to {IDEMPOTENCY_KEY_MAX} visible ASCII characters"
            )


def _check_ids(path: str, pets: list[Pet]) -> None:
    """Ids strictly increase, line after line; else DataFileError naming the first that doesn't."""
    ids = list(map(_ID, pets))
    if all(map(operator.lt, [0, *ids], ids)):
        return
    last_id = 0
    for number, pet_id in enumerate(ids, 1):
        if pet_id <= last_id:
            raise DataFileError(
                f"{path}, line {number}: id {pet_id} is not above the id {last_id} before it"
            )
        last_id = pet_id
