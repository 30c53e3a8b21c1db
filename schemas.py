"""Wire types of the petstore: msgspec Structs, their codecs, Error responses and the constants."""

from __future__ import annotations

import datetime
import decimal
import enum
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar, get_args

import msgspec
from starlette import routing
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocketClose

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
LIMIT_MIN: Final = 1
LIMIT_MAX: Final = 100
LIMIT_DEFAULT: Final = 20

API_PREFIX: Final = "/v1"
PETS_PATH: Final = f"{API_PREFIX}/pets"
OPENAPI_PATH: Final = f"{API_PREFIX}/openapi.json"
ADMIN_PREFIX: Final = "/_admin"
ADMIN_OPENAPI_PATH: Final = f"{ADMIN_PREFIX}/openapi.json"
BEARER_REALM: Final = "petstore"
ADMIN_REALM: Final = "petstore-admin"

# getPet is deprecated: Deprecation (RFC 9745) is the day it was announced, 2026-01-01 UTC;
# Sunset (RFC 8594) the day it goes.
DEPRECATION: Final = "@1767225600"
SUNSET: Final = "Thu, 05 Dec 2030 00:00:00 GMT"

IDEMPOTENCY_KEY_MAX: Final = 255
# The header's value: 1 to 255 visible ASCII characters, bare (no quote at either end) or a
# quoted string whose quoted-pairs (`\"`) count as one character.
IDEMPOTENCY_KEY_PATTERN: Final = (
    r"^(?:[\x21\x23-\x7e](?:[\x21-\x7e]{0,253}[\x21\x23-\x7e])?"
    r'|"(?:[\x21\x23-\x5b\x5d-\x7e]|\\[\x21-\x7e]){1,255}")$'
)
JOURNAL_BODY_LIMIT: Final = 4096
DELAY_MAX_MS: Final = 60_000
InjectableStatus = Literal[429, 500, 502, 503, 504]
INJECTABLE_STATUSES: Final = get_args(InjectableStatus)
RETRY_AFTER_STATUSES: Final = (429, 503)
COUNT_MAX: Final = 2**31 - 1  # a rule's `times` and `retryAfter` at most


class PetStatus(enum.Enum):
    """Availability of an animal."""

    AVAILABLE = "available"
    PENDING = "pending"
    SOLD = "sold"

    __hash__ = object.__hash__  # members equal only themselves; Enum's own hash is Python code


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
    TENANT_LIMIT_REACHED = "tenant_limit_reached"


INT64: Final = {"format": "int64"}
# The examples fill /docs' forms: without them Swagger UI writes the int64 minimum.
Name = Annotated[str, msgspec.Meta(min_length=1, description="The animal's name", examples=["Rex"])]
CategoryId = Annotated[
    int,
    msgspec.Meta(
        ge=INT64_MIN,
        le=INT64_MAX,
        description="Id of the category the animal belongs to",
        examples=[1],
        extra_json_schema=INT64,
    ),
]
PetId = Annotated[
    int,
    msgspec.Meta(
        ge=1, le=INT64_MAX, description="Assigned by the service", extra_json_schema=INT64
    ),
]


class NewPet(msgspec.Struct, forbid_unknown_fields=True):
    """An animal as a client sends it to createPet."""

    name: Name
    categoryId: CategoryId
    status: PetStatus | msgspec.UnsetType = msgspec.UNSET


# gc=False: a million stored pets hold nothing the cycle collector must walk.
class Pet(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """An animal as stored and returned; `status` stays absent when it was never given."""

    id: PetId
    name: Name
    categoryId: CategoryId
    status: PetStatus | msgspec.UnsetType = msgspec.UNSET


class SeedPet(NewPet, forbid_unknown_fields=True, kw_only=True):
    """An item of a seed: a NewPet, or a Pet that keeps the id it gives."""

    id: PetId | msgspec.UnsetType = msgspec.UNSET


def stored_pet(pet_id: int, new_pet: NewPet) -> Pet:
    """The pet a create (or a seed item) is stored as, under this id."""
    return Pet(
        id=pet_id, name=new_pet.name, categoryId=int(new_pet.categoryId), status=new_pet.status
    )


class Error(msgspec.Struct, frozen=True):
    """The body of every response that is not 2xx; `status` repeats the HTTP status."""

    code: ErrorCode
    message: Annotated[str, msgspec.Meta(description="What went wrong, for a person")]
    status: Annotated[int, msgspec.Meta(ge=400, le=599, description="The HTTP status")]


# An operation a fault rule applies to; `*` is any of the three.
Operation = Literal["listPets", "createPet", "getPet", "*"]


Count = Annotated[int, msgspec.Meta(ge=1, le=COUNT_MAX)]


class NewFaultRule(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A fault rule as POST /_admin/faults takes it: `operation` and one of `status`, `delayMs`
    or `drop` (not both `status` and `drop`); `retryAfter` only with 429 or 503."""

    operation: Operation
    status: InjectableStatus | msgspec.UnsetType = msgspec.UNSET
    delayMs: Annotated[int, msgspec.Meta(ge=0, le=DELAY_MAX_MS)] | msgspec.UnsetType = msgspec.UNSET
    drop: bool | msgspec.UnsetType = msgspec.UNSET
    times: Count | msgspec.UnsetType = msgspec.UNSET
    probability: Annotated[float, msgspec.Meta(ge=0, le=1)] | msgspec.UnsetType = msgspec.UNSET
    retryAfter: Annotated[int, msgspec.Meta(ge=0, le=COUNT_MAX)] | msgspec.UnsetType = msgspec.UNSET


class FaultRule(NewFaultRule, kw_only=True, frozen=True):
    """A fault rule in force; `times`, if given, is what is left of it."""

    id: Annotated[int, msgspec.Meta(ge=1)]


class JournalEntry(msgspec.Struct):
    """One request under /v1 as the service received and answered it, no credential in it."""

    seq: int
    time: Annotated[str, msgspec.Meta(description="When it arrived, RFC 3339, UTC")]
    method: str
    path: str
    query: str
    status: Annotated[int | None, msgspec.Meta(description="null: the connection was dropped")]
    durationMs: float
    requestId: str
    headers: dict[str, str]
    body: str | msgspec.UnsetType = msgspec.UNSET
    bodyTruncated: bool | msgspec.UnsetType = msgspec.UNSET


class Journal(msgspec.Struct):
    """The journal, oldest first; `dropped` counts entries the ring pushed out since a clear."""

    requests: list[JournalEntry]
    dropped: int
    complete: Annotated[
        bool | msgspec.UnsetType, msgspec.Meta(description="With atLeast: whether it was reached")
    ] = msgspec.UNSET


class ResetDone(msgspec.Struct):
    """The store is back to its state right after start: this many pets."""

    pets: int


class NewTenant(msgspec.Struct, forbid_unknown_fields=True):
    """A tenant to make: it starts from `pets` (the seed file's form), else the service's seed."""

    pets: list[SeedPet] | msgspec.UnsetType = msgspec.UNSET


class TenantCreated(msgspec.Struct):
    """A tenant made: its id, its API key (shown in this answer only) and its pets."""

    id: str
    apiKey: str
    pets: int


class TenantInfo(msgspec.Struct):
    """A tenant: its pets, when it was made and last used (RFC 3339, UTC)."""

    id: str
    pets: int
    created: str
    lastUsed: str


class TenantList(msgspec.Struct):
    """Every tenant, oldest first."""

    tenants: list[TenantInfo]


def rfc3339(seconds: float) -> str:
    """A Unix time as RFC 3339 in UTC, to the microsecond."""
    when = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------ responses and their errors


class JSONResponse(Response):
    """A response whose content is encoded by msgspec (a Struct, a list, a dict)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return content if isinstance(content, bytes) else encoder.encode(content)


class ApiError(Exception):
    """A request the service turns down: raised anywhere, answered with the Error shape."""

    def __init__(
        self, status: int, code: ErrorCode, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers

    def response(self) -> JSONResponse:
        return error_response(self.status, self.code, self.message, self.headers)


def error_response(
    status: int, code: ErrorCode, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """The Error shape, with `status` equal to the HTTP status."""
    return JSONResponse(Error(code, message, status), status, headers)


class Route(routing.Route):
    """Starlette's Route for an `async (Request) -> Response` endpoint, called directly: there
    are no exception handlers to look up (BearerAuth answers ApiErrors). A method it doesn't take
    is refused in the Error shape."""

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.methods and scope["method"] not in self.methods:
            allow = {"Allow": ", ".join(sorted(self.methods))}
            raise ApiError(405, ErrorCode.METHOD_NOT_ALLOWED, "Method not allowed here", allow)
        response = await self.endpoint(Request(scope, receive, send))
        await response(scope, receive, send)


async def not_found(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer at a path no route takes; a WebSocket, which none takes, is closed."""
    if scope["type"] == "websocket":
        return await WebSocketClose()(scope, receive, send)
    raise ApiError(404, ErrorCode.NOT_FOUND, "No resource at this path")


def invalid(message: str) -> ApiError:
    """A 400 `validation_error`: a parameter, a header or a body the contract refuses."""
    return ApiError(400, ErrorCode.VALIDATION_ERROR, message)


# ------------------------------------------------------------------ decoding


def _exact_number(text: str) -> decimal.Decimal:
    """A JSON number with a fraction or an exponent, exactly (an exponent past a Decimal's
    range is an infinity, refused as out of range, or a zero)."""
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        mantissa = re.split("[eE]", text)[0]
        if not mantissa.strip("-+0."):
            return decimal.Decimal(0)
        return decimal.Decimal("-Infinity" if text.startswith("-") else "Infinity")


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
    """A msgspec message in JSON's words, its field first: "Expected `int`, got `str` - at
    `$.categoryId`" is "$.categoryId: expected an integer, got a string"."""
    message = _TYPE_NAME.sub(lambda found: f"{found[1]} {_JSON_WORDS[found[2]]}", message)
    if at := _AT_FIELD.fullmatch(message):
        return f"{at[2]}: {at[1][:1].lower()}{at[1][1:]}"
    return message


T = TypeVar("T")
_any_json: Final = msgspec.json.Decoder(float_hook=_exact_number)


def decode(body: bytes, type_: type[T]) -> T:
    """The body as `type_`, or a 400: `malformed_json` when it is not JSON at all (whatever else
    is wrong with it), else `validation_error` naming the field and the problem. Whole numbers
    count as JSON Schema counts them: `1.0` is 1."""
    try:  # not contextlib.suppress, whose object each create would pay for
        return msgspec.json.decode(body, type=type_)  # the common case, in one pass
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        pass
    try:
        value = _any_json.decode(body)
    except msgspec.ValidationError:  # a whole number past Python's: JSON, if the syntax holds
        raise (
            malformed(reason) if (reason := not_json(body)) else invalid("A number is out of range")
        ) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        raise malformed(_why(error, body)) from None
    try:
        return msgspec.convert(_whole(value), type_)
    except msgspec.ValidationError as error:
        raise invalid(in_json_words(str(error))) from None


def _whole(value: object) -> object:
    """`value` with its numbers that have a fraction or an exponent (read as exact Decimals) as
    ints where they are whole, else as floats."""
    if isinstance(value, dict):
        return {name: _whole(item) for name, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    if isinstance(value, decimal.Decimal):
        whole = value.is_finite() and value == value.to_integral_value() and value.adjusted() < 19
        return int(value) if whole else float(value)
    return value


def not_json(body: bytes) -> str | None:
    """Why `body` is not one JSON text, or None when it is (its numbers, whatever their size)."""
    try:
        msgspec.json.decode(body, type=msgspec.Raw)
        body.decode()  # what the syntax check does not look at: the bytes of strings
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        return _why(error, body)
    return None


def _why(error: Exception, body: bytes) -> str:
    if not body.strip(b" \t\r\n"):
        return "it is empty" if not body else "it is only whitespace"
    if isinstance(error, UnicodeDecodeError):
        return "invalid UTF-8"
    if isinstance(error, RecursionError):
        return "nested too deeply to read"
    return in_json_words(str(error))


def malformed(reason: str) -> ApiError:
    return ApiError(400, ErrorCode.MALFORMED_JSON, f"Body is not JSON: {reason}")


encoder: Final = msgspec.json.Encoder()
pet_decoder: Final = msgspec.json.Decoder(Pet)
