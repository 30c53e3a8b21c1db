"""Wire types of the petstore interface: msgspec Structs, their codecs, the contract's constants."""

from __future__ import annotations

import datetime
import decimal
import enum
import functools
import math
import re
import time
from typing import Annotated, Any, Final, Literal, get_args

import msgspec

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

LIMIT_MIN: Final = 1
LIMIT_MAX: Final = 100
LIMIT_DEFAULT: Final = 20

# The API's version: every path of the three operations' and their document's is under it.
API_PREFIX: Final = "/v1"
# listPets and createPet; getPet is under it, and names it its successor.
PETS_PATH: Final = f"{API_PREFIX}/pets"
# getPet is deprecated (SPEC.md 4.3). Deprecation (RFC 9745) carries the date we announced it,
# 2026-01-01T00:00:00Z; Sunset (RFC 8594) the removal date SPEC.md gives.
DEPRECATION: Final = "@1767225600"
SUNSET: Final = "Thu, 05 Dec 2030 00:00:00 GMT"

BEARER_REALM: Final = "petstore"
ADMIN_REALM: Final = "petstore-admin"

# The test-control plane's bounds (CONTRACT.md, Test-control plane).
InjectableStatus = Literal[429, 500, 502, 503, 504]
INJECTABLE_STATUSES: Final = get_args(InjectableStatus)
RETRY_AFTER_STATUSES: Final = (429, 503)
DELAY_MAX_MS: Final = 60_000
# A fault rule's `times` and `retryAfter` at most: the largest delta-seconds HTTP caches keep
# (RFC 9111 1.2.2), and a count past any test's (a number past 2**53 is rounded by JavaScript).
RULE_COUNT_MAX: Final = 2**31 - 1
JOURNAL_BODY_LIMIT: Final = 4096
# A request's headers are kept up to this many bytes (names and values), whole, in the order
# sent; the rest are left out of its journal entry (`headersTruncated`). A head may be 64 KiB
# and more: a thousand of them kept took 112 MB of the process.
HEADERS_KEPT: Final = 16 * 1024

# Idempotency-Key (draft-ietf-httpapi-idempotency-key-header): 1 to 255 visible ASCII characters.
IDEMPOTENCY_KEY_MAX: Final = 255


def is_idempotency_key(text: str) -> bool:
    """Whether `text` is 1 to IDEMPOTENCY_KEY_MAX characters of 0x21-0x7e (str methods: a
    regular expression costs more)."""
    return (
        0 < len(text) <= IDEMPOTENCY_KEY_MAX
        and text.isascii()
        and text.isprintable()
        and " " not in text
    )


# A character of a quoted key (RFC 9110 5.6.4): visible, a quote or a backslash written as a
# quoted-pair (`\\"`), which stands for its character (parsing.py checks keys with it).
QUOTED_KEY_CHARACTER: Final = r"[\x21\x23-\x5b\x5d-\x7e]|\\[\x21-\x7e]"
# The header's value: the key bare (not beginning or ending with a quote), or quoted with
# quoted-pairs (`"a\\"b"` is `a"b`).
IDEMPOTENCY_HEADER_PATTERN: Final = (
    r"^(?:[\x21\x23-\x7e](?:[\x21-\x7e]{0,253}[\x21\x23-\x7e])?"
    f'|"(?:{QUOTED_KEY_CHARACTER}){{1,255}}")$'
)


class PetStatus(enum.Enum):
    """Availability of an animal."""

    AVAILABLE = "available"
    PENDING = "pending"
    SOLD = "sold"


class ErrorCode(enum.Enum):
    """Machine-readable error codes, one per kind of failure."""

    UNAUTHORIZED = "unauthorized"
    MALFORMED_JSON = "malformed_json"
    VALIDATION_ERROR = "validation_error"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    INTERNAL_ERROR = "internal_error"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    RESET_UNAVAILABLE = "reset_unavailable"
    INJECTED_FAULT = "injected_fault"


class CategoryId(int):
    """An int64 as JSON Schema counts integers: `1.0` is the integer 1, `true` and `"1"` are not.

    msgspec alone is stricter (it refuses `1.0`), so `decode_hook` below does the checking.
    """


class SeedId(int):
    """A seed file's pet id, from 1 to 2^63 - 1, counted as CategoryId counts integers (`2.0`
    is 2): a seed file is the body of createPet's kind, written by hand."""


# The examples are what /docs fills a request in with: without them Swagger UI wrote the
# minimum, -9223372036854775808, which JavaScript rounds out of int64 (a 400 at first try).
Name = Annotated[str, msgspec.Meta(min_length=1, description="The animal's name", examples=["Rex"])]
StoredCategoryId = Annotated[
    int,
    msgspec.Meta(
        ge=INT64_MIN,
        le=INT64_MAX,
        description="Id of the category the animal belongs to",
        examples=[1],
        extra_json_schema={"format": "int64"},
    ),
]
PetId = Annotated[
    int,
    msgspec.Meta(
        ge=1,
        le=INT64_MAX,
        description="Assigned by the service",
        extra_json_schema={"format": "int64"},
    ),
]


class NewPet(msgspec.Struct, forbid_unknown_fields=True):
    """An animal as a client sends it to createPet."""

    name: Name
    categoryId: CategoryId  # the wire name is camelCase (SPEC.md)
    status: PetStatus | msgspec.UnsetType = msgspec.UNSET


# gc=False: a million stored pets hold no references the cycle collector must walk. (Not in the
# docstring: msgspec makes that the schema's description, which client generators show.)
class Pet(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """An animal as stored and returned; `status` stays absent when it was never given."""

    id: PetId
    name: Name
    categoryId: StoredCategoryId  # the wire name is camelCase (SPEC.md)
    status: PetStatus | msgspec.UnsetType = msgspec.UNSET


class SeedPet(msgspec.Struct, forbid_unknown_fields=True):
    """An item of a seed file: a NewPet, or a Pet that keeps the id it gives."""

    name: Name
    categoryId: CategoryId  # the wire name is camelCase (SPEC.md)
    status: PetStatus | msgspec.UnsetType = msgspec.UNSET
    id: SeedId | msgspec.UnsetType = msgspec.UNSET


def stored_pet(pet_id: int, new_pet: NewPet | SeedPet) -> Pet:
    """The pet a create (or a seed item) is stored as, under this id."""
    return Pet(
        id=pet_id, name=new_pet.name, categoryId=int(new_pet.categoryId), status=new_pet.status
    )


class Error(msgspec.Struct, frozen=True):
    """The body of every response that is not 2xx; `status` repeats the HTTP status."""

    code: ErrorCode
    message: Annotated[str, msgspec.Meta(description="What went wrong, for a person")]
    status: Annotated[
        int, msgspec.Meta(ge=400, le=599, description="The HTTP status of the response")
    ]


class Operation(enum.Enum):
    """An operation of the interface a fault rule applies to; `*` is any of the three."""

    LIST_PETS = "listPets"
    CREATE_PET = "createPet"
    GET_PET = "getPet"
    ANY = "*"


class NewFaultRule(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A fault rule as POST /_admin/faults takes it: `operation` and one of `status`, `delayMs`
    or `drop` (not both `status` and `drop`); `retryAfter` only with 429 or 503."""

    operation: Operation
    status: InjectableStatus | msgspec.UnsetType = msgspec.UNSET
    delayMs: Annotated[int, msgspec.Meta(ge=0, le=DELAY_MAX_MS)] | msgspec.UnsetType = msgspec.UNSET
    drop: bool | msgspec.UnsetType = msgspec.UNSET
    times: Annotated[int, msgspec.Meta(ge=1, le=RULE_COUNT_MAX)] | msgspec.UnsetType = msgspec.UNSET
    probability: Annotated[float, msgspec.Meta(ge=0, le=1)] | msgspec.UnsetType = msgspec.UNSET
    retryAfter: Annotated[int, msgspec.Meta(ge=0, le=RULE_COUNT_MAX)] | msgspec.UnsetType = (
        msgspec.UNSET
    )


class FaultRule(NewFaultRule, kw_only=True, frozen=True):
    """A fault rule in force; `times`, if given, is what is left of it."""

    id: Annotated[int, msgspec.Meta(ge=1)]


class JournalEntry(msgspec.Struct):
    """One request under /v1 as the service received and answered it (no credential in it)."""

    seq: int
    time: Annotated[str, msgspec.Meta(description="When it arrived, RFC 3339, UTC")]
    method: str
    path: str
    query: str
    status: Annotated[int | None, msgspec.Meta(description="null: the connection was dropped")]
    durationMs: float
    requestId: str
    headers: dict[str, str]
    headersTruncated: Annotated[
        bool | msgspec.UnsetType,
        msgspec.Meta(
            description=f"Headers past {HEADERS_KEPT // 1024} KiB (names and values) were left out"
        ),
    ] = msgspec.UNSET
    body: str | msgspec.UnsetType = msgspec.UNSET
    bodyTruncated: bool | msgspec.UnsetType = msgspec.UNSET


class Journal(msgspec.Struct):
    """The journal, oldest first; `dropped` counts entries the ring pushed out since a clear."""

    requests: list[JournalEntry]
    dropped: int


class ResetDone(msgspec.Struct):
    """The store is back to its state right after start: this many pets."""

    pets: int


_JSON_TYPE_NAMES: Final = {
    type(None): "null",
    bool: "bool",
    str: "str",
    float: "float",
    decimal.Decimal: "float",
    list: "array",
    dict: "object",
}


# The integers decode_hook makes, and their bounds.
_INTEGER_BOUNDS: Final[dict[type, tuple[int, int]]] = {
    CategoryId: (INT64_MIN, INT64_MAX),
    SeedId: (1, INT64_MAX),
}


def decode_hook(type_: type, value: Any) -> Any:
    """Turn a decoded JSON value into a `CategoryId` or a `SeedId`, in msgspec's own wording
    when it can't.

    Numbers with a fraction or exponent arrive as exact Decimals (the decoders' float_hook), so
    `1.0` and `1e2` are integers while `1.0000000000000001` is not, as JSON Schema counts them.
    """
    bounds = _INTEGER_BOUNDS.get(type_)
    if bounds is None:
        raise NotImplementedError(type_)
    if type(value) is decimal.Decimal:
        if value != value.to_integral_value():
            raise TypeError("Expected `int`, got `float`")
    elif type(value) is not int:
        raise TypeError(f"Expected `int`, got `{_JSON_TYPE_NAMES.get(type(value), 'value')}`")
    # Checked before the int is made, so that 1e999999999 costs nothing.
    low, high = bounds
    if value < low:
        raise ValueError(f"Expected `int` >= {low}")
    if value > high:
        raise ValueError(f"Expected `int` <= {high}")
    return type_(value)


def schema_hook(type_: type) -> dict[str, Any]:
    """CategoryId's JSON Schema: StoredCategoryId's (on the wire both are the same int64)."""
    if type_ is CategoryId:
        return msgspec.json.schema(StoredCategoryId)
    raise NotImplementedError(type_)


def exact_number(text: str) -> decimal.Decimal | float:
    """A JSON number with a fraction or an exponent, exactly (the decoders' float_hook). One
    whose exponent is past what a Decimal holds (`1e99999999999999999999`) is zero when its
    digits are (`0e99999999999999999999`), an infinite Decimal when it is that large, else the
    float it rounds to (0.0: no whole number), so that it is refused like any number out of
    range instead of raising InvalidOperation."""
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        digits = text.partition("e")[0].partition("E")[0]
        if not digits.strip("-0."):
            return decimal.Decimal(0)
        rounded = float(text)
        return decimal.Decimal(rounded) if math.isinf(rounded) else rounded


# msgspec's names of types, as JSON (and a client in any language) calls them.
_JSON_WORDS: Final = {
    "int": "an integer",
    "str": "a string",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
    "object": "an object",
    "array": "an array",
}
_TYPE_NAME: Final = re.compile(r"(Expected|got) `(int|str|float|bool|null|object|array)`")
_AT_FIELD: Final = re.compile(r"(.+) - at `(\$[^`]*)`")


def in_json_words(message: str) -> str:
    """A msgspec message in JSON's words, its field first, as CONTRACT.md writes one: "Expected
    `int`, got `str` - at `$.categoryId`" is "$.categoryId: expected an integer, got a string"."""
    message = _TYPE_NAME.sub(lambda match: f"{match[1]} {_JSON_WORDS[match[2]]}", message)
    if at := _AT_FIELD.fullmatch(message):
        return f"{at[2]}: {at[1][:1].lower()}{at[1][1:]}"
    return message


new_pet_decoder: Final = msgspec.json.Decoder(NewPet, dec_hook=decode_hook, float_hook=exact_number)
pet_decoder: Final = msgspec.json.Decoder(Pet)
seed_decoder: Final = msgspec.json.Decoder(
    list[SeedPet], dec_hook=decode_hook, float_hook=exact_number
)
# Any JSON text at all, numbers of any size (to tell "not JSON" from "not a NewPet"), but a
# whole number of more than 4,300 digits: Python makes no int of that many (a ValidationError).
any_json_decoder: Final = msgspec.json.Decoder(float_hook=exact_number)
# Any JSON text at all, its values read but not made: whether it is JSON, whatever its numbers.
json_syntax_decoder: Final = msgspec.json.Decoder(msgspec.Raw)
encoder: Final = msgspec.json.Encoder()


# Times as the wire writes them (a journal entry's, a JSON log line's): RFC 3339, UTC.


def wall_minus_perf_counter_ns() -> int:
    """What turns a time.perf_counter_ns() into the wall clock's time.time_ns(), now. Requests
    are timed by that clock (which the access log reads anyway); this is read again for each
    batch of times written out, as the wall clock may have been set (or the machine
    suspended) since the start."""
    return time.time_ns() - time.perf_counter_ns()


def rfc3339(time_ns: int) -> str:
    """A wall-clock time (ns since the epoch) as RFC 3339 in UTC, to the microsecond (cut, not
    rounded). The date and time to the second are made once a second: a datetime made and
    formatted for each of the access log's JSON lines cost several times this (README:
    Performance)."""
    seconds, ns = divmod(time_ns, 1_000_000_000)
    return f"{_to_the_second(seconds)}.{ns // 1000:06d}Z"


@functools.lru_cache(maxsize=4)
def _to_the_second(seconds: int) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")
