"""Reading requests strictly: query parameters, integer path segments, the JSON body of a create."""

from __future__ import annotations

import decimal
import re
import urllib.parse
from typing import Final

import msgspec
from starlette.types import Receive, Scope

from routing import BODY, ClientGone, Refused, header, invalid
from schemas import (
    IDEMPOTENCY_KEY_MAX,
    INT64_MAX,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    LIMIT_MIN,
    QUOTED_KEY_CHARACTER,
    ErrorCode,
    NewFaultRule,
    NewPet,
    PetStatus,
    any_json_decoder,
    in_json_words,
    is_idempotency_key,
    json_syntax_decoder,
    new_pet_decoder,
)

_STATUS_BY_VALUE: Final = {status.value: status for status in PetStatus}


def integer(text: str) -> int | None:
    """The integer written as ASCII digits, maybe after a "-", at most 19 of them but leading
    zeros (`0…01` is 1, however many); else None. (int() alone takes " 5", "+5", "5_0",
    Arabic-Indic digits, and refuses 4,301 digits, zeros too.)"""
    digits = text[1:] if text[:1] == "-" else text
    if not (digits.isascii() and digits.isdigit()):
        return None
    if len(digits) <= 19:
        return int(text)
    digits = digits.lstrip("0") or "0"
    if len(digits) > 19:
        return None
    return -int(digits) if text[:1] == "-" else int(digits)


def query(query_string: bytes, names: frozenset[str], *, strict: bool = False) -> dict[str, str]:
    """The values of these query parameters, each at most once (400 if repeated); others are
    ignored, or, `strict`, a 400 naming the ones known. Starlette's QueryParams costs 3 us;
    this, under one."""
    params: dict[str, str] = {}
    for pair in query_string.decode("latin-1").split("&") if query_string else ():
        name, _, value = pair.partition("=")
        if "%" in pair or "+" in pair:  # decoded as urllib.parse.parse_qsl does
            name, value = urllib.parse.unquote_plus(name), urllib.parse.unquote_plus(value)
        if name in names:
            if name in params:
                raise invalid(f"Query parameter `{name}` is given more than once")
            params[name] = value
        elif strict and pair:
            known = ", ".join(f"`{known}`" for known in sorted(names))
            raise invalid(f"Query parameter `{name}` is not one of {known}")
    return params


# A quoted string of visible characters, a quote or a backslash inside written as a
# quoted-pair, which stands for its character.
_QUOTED_KEY: Final = re.compile(f'"(?:{QUOTED_KEY_CHARACTER})+"'.encode())
_QUOTED_PAIR: Final = re.compile(rb"\\(.)", re.DOTALL)
_LIST_PARAMETERS: Final = frozenset({"limit", "status", "after"})


def list_query(query_string: bytes) -> tuple[int, PetStatus | None, int]:
    params = query(query_string, _LIST_PARAMETERS)
    limit, status, after = LIMIT_DEFAULT, None, 0
    if (text := params.get("limit")) is not None:
        value = integer(text)
        if value is None or not LIMIT_MIN <= value <= LIMIT_MAX:
            raise invalid(
                f"Query parameter `limit` must be an integer from {LIMIT_MIN} to {LIMIT_MAX}"
            )
        limit = value
    if (text := params.get("status")) is not None:
        status = _STATUS_BY_VALUE.get(text)
        if status is None:
            allowed = ", ".join(_STATUS_BY_VALUE)
            raise invalid(f"Query parameter `status` must be one of {allowed}")
    if (text := params.get("after")) is not None:
        value = integer(text)
        if value is None or not 0 <= value <= INT64_MAX:
            raise invalid(f"Query parameter `after` must be an integer from 0 to {INT64_MAX}")
        after = value
    return limit, status, after


def idempotency_key(scope: Scope) -> str | None:
    """The request's Idempotency-Key, bare or as a quoted string (`"abc"` is `abc`, `"a\\"b"` is
    `a"b`), whitespace after it left out; None without one; a 400 for anything but 1 to 255
    visible ASCII characters, or two of them. A bare key can't begin or end with a quote: `"abc`
    and `abc"` are quoting gone wrong (a proxy's, a client's), and each was taken as a new key."""
    found: bytes | None = None
    for name, value in scope["headers"]:
        if name == b"idempotency-key":
            if found is not None:
                raise invalid("Idempotency-Key is given more than once")
            found = value
    if found is None:
        return None
    found = found.rstrip(b" \t")  # whitespace after a value is not part of it (RFC 9110 5.5)
    if found.startswith(b'"') or found.endswith(b'"'):
        if not _QUOTED_KEY.fullmatch(found):
            raise invalid(
                "Idempotency-Key is neither bare nor a quoted string: a quoted one begins and"
                " ends with its quotes, a quote inside written \\\", and a bare one can't begin"
                " or end with a quote"
            )
        found = found[1:-1]  # "abc" is abc
        if b"\\" in found:  # a quoted-pair stands for its character: "a\"b" is a"b
            found = _QUOTED_PAIR.sub(rb"\1", found)
    key = found.decode("latin-1")
    if not is_idempotency_key(key):
        raise invalid(
            f"Idempotency-Key must be 1 to {IDEMPOTENCY_KEY_MAX} visible ASCII characters, bare"
            " or quoted"
        )
    return key


def require_json(scope: Scope) -> None:
    """A 415 unless the body is JSON as sent: its Content-Type JSON, no Content-Encoding but
    `identity` (a gzip body was read as if it were JSON; RFC 9110 15.5.16 asks a 415), and no
    transfer coding but `chunked` (the server undoes only that one: `gzip, chunked` was read
    as if it were JSON too; RFC 9112 6.1 asks a 501, the same refusal of
    the same body). One look through the headers for all three: this runs for every create."""
    content_type = encoding = transfer = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            if content_type is None:
                content_type = value.decode("latin-1")
        elif name == b"content-encoding":  # each of several: one list (RFC 9110 5.3)
            encoding = value if encoding is None else b"%s,%s" % (encoding, value)
        elif name == b"transfer-encoding":  # the same
            transfer = value if transfer is None else b"%s,%s" % (transfer, value)
    if not is_json(content_type):
        raise Refused(
            415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, "Content-Type must be application/json (UTF-8)"
        )
    if encoding is not None and any(coding != b"identity" for coding in _codings(encoding)):
        raise Refused(
            415,
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Encoding {encoding.decode('latin-1').strip()!r} is not supported: send the"
            " body as it is",
        )
    if transfer is not None and _codings(transfer) != [b"chunked"]:
        raise Refused(
            415,
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"Transfer-Encoding {transfer.decode('latin-1')!r} is not supported: send the body"
            " as it is, chunked or with a Content-Length",
        )


def _codings(listed: bytes) -> list[bytes]:
    """The codings a Content-Encoding or Transfer-Encoding lists, in lower case, parameters
    and all."""
    return [coding.strip().lower() for coding in listed.split(b",") if coding.strip()]


def is_json(content_type: str | None) -> bool:
    """application/json, with parameters allowed so long as any charset is UTF-8."""
    if content_type is None:
        return False
    if content_type == "application/json":
        return True
    media_type, *parameters = (part.strip().lower() for part in content_type.split(";"))
    if media_type != "application/json":
        return False
    for parameter in parameters:
        name, _, value = parameter.partition("=")
        if name.strip() == "charset" and value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


def _too_large(limit: int) -> Refused:
    return Refused(
        413,
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"The body is over the limit of {limit} bytes",
        # Close the connection rather than read the rest of a body we won't use.
        {"Connection": "close"},
    )


def _declared_over(scope: Scope, limit: int) -> bool:
    """Whether the request's Content-Length says its body is over `limit` bytes."""
    declared = header(scope, b"content-length")
    return (
        declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit
    )


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole body, refused early (by Content-Length) or as soon as it passes `limit`. What
    was read of it stays in scope[BODY], as chunks (the journal keeps createPet's)."""
    if _declared_over(scope, limit):
        raise _too_large(limit)
    chunks: list[bytes] = []
    scope[BODY] = chunks
    size = 0
    while True:  # ASGI messages read directly: a Request and its stream() cost more
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_body_start(scope: Scope, receive: Receive, most: int, limit: int) -> None:
    """Read the body into scope[BODY], as read_body does, until it ends or passes `most` bytes,
    the rest left unread: for the journal, the body of a create that is refused (an injected
    status, a 409, a 415) and answered once it is read. Not when its client waits for a `100
    Continue` (reading would ask it for what is refused), nor when its Content-Length is over
    `limit` (the service reads none of such a body: its client may wait for the answer before
    sending it, as a 413 lets it): the answer goes at once. ClientGone when the client leaves
    meanwhile."""
    expect = header(scope, b"expect")
    if (expect is not None and expect.lower() == "100-continue") or _declared_over(scope, limit):
        return
    chunks: list[bytes] = []
    scope[BODY] = chunks
    size = 0
    while size <= most:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if not message.get("more_body", False):
            return


def decode_new_pet(body: bytes) -> NewPet:
    """The body as a NewPet; a 400 `malformed_json` or `validation_error` saying why not."""
    try:
        return new_pet_decoder.decode(body)
    except msgspec.ValidationError as error:  # a subclass of DecodeError: first
        # msgspec checks types as it parses, so it names the first wrong type it meets even
        # when the syntax breaks further on (`[1,2,`, `{"id":1} x`): not JSON wins over that.
        if (problem := json_problem(body)) is not None:
            raise _malformed(problem) from None
        raise invalid(in_json_words(_number_where_none_goes(str(error)))) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        raise _malformed(not_json_reason(error, body)) from None


# What NewPet wants where no number goes, as msgspec names it ("" the body itself).
_NO_NUMBER_AT: Final = {"": "object", "$.name": "str", "$.status": "str"}


def _number_where_none_goes(message: str) -> str:
    """msgspec's message, or for a number it can't make (past 4,300 digits, or past a float's
    range) in a place that wants no number, what it says of a number it can make there: it
    reads the number before it looks at the place, and said "Number out of range" (where a
    number goes, categoryId's hook says "Integer value out of range")."""
    problem, _, place = message.partition(" - at ")
    wanted = _NO_NUMBER_AT.get(place.strip("`"))
    if problem != "Number out of range" or wanted is None:
        return message
    return f"Expected `{wanted}`, got `float`{message[len(problem) :]}"


def decode_fault_rule(body: bytes) -> NewFaultRule:
    """The body as a NewFaultRule, its whole numbers read as JSON Schema counts them (`5.0` is
    5), as the schema in the control plane's document says; a 400 saying why not. Decoded,
    then converted: the one body not decoded straight into its Struct (STYLE), as a rule's
    numbers are many and its `status` a Literal, and NewPet's way (a type with a decode hook
    for its one number) would take a type each. Off the request path: the plane's admin."""
    try:
        fields = any_json_decoder.decode(body)
    except msgspec.ValidationError:  # a number of more than 4,300 digits, or not JSON after all
        if (problem := json_problem(body)) is not None:
            raise _malformed(problem) from None
        raise invalid(_out_of_range(body)) from None
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        raise _malformed(not_json_reason(error, body)) from None
    if isinstance(fields, dict):
        fields = {name: _number(value) for name, value in fields.items()}
    try:
        return msgspec.convert(fields, NewFaultRule)
    except msgspec.ValidationError as error:
        raise invalid(in_json_words(str(error))) from None


def _number(value: object) -> object:
    """A decoded Decimal as an int when it is a whole number (of at most 19 digits: more would
    be refused anyway, and 1e999999999 must not become an int), else as a float (an infinite
    one too)."""
    if isinstance(value, decimal.Decimal):
        whole = value.is_finite() and value == value.to_integral_value() and value.adjusted() < 19
        return int(value) if whole else float(value)
    return value


def json_problem(data: bytes) -> str | None:
    """Why `data` is not one JSON text, or None when it is."""
    try:
        any_json_decoder.decode(data)
    except msgspec.ValidationError:  # a whole number of more than 4,300 digits: JSON all the same
        try:
            json_syntax_decoder.decode(data)
            data.decode()  # what any_json_decoder checks in strings, which Raw does not look at
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
            return not_json_reason(error, data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as error:
        return not_json_reason(error, data)
    return None


def _out_of_range(rule: bytes) -> str:
    """Why a fault rule that is JSON, and has a whole number any_json_decoder can't make, is
    refused: where that number is, or that the rule is not an object."""
    try:
        fields = msgspec.json.decode(rule, type=dict[str, msgspec.Raw])
    except msgspec.ValidationError as error:
        return in_json_words(str(error))
    for name, value in fields.items():
        try:
            any_json_decoder.decode(value)
        except msgspec.ValidationError:
            return f"$.{name}: integer value out of range"
    return "Integer value out of range"  # not reached: the number is one of the fields'


def not_json_reason(error: Exception, data: bytes) -> str:
    """Why `data` is not JSON, as the decoder that refused it with `error` says, in words."""
    if not data.strip(b" \t\r\n"):  # msgspec says "Input data was truncated": none was sent
        return "it is empty" if not data else "it is only whitespace"
    if isinstance(error, UnicodeDecodeError):  # msgspec lets it through for bad bytes in a string
        return "invalid UTF-8"
    if isinstance(error, RecursionError):  # msgspec follows nesting as deep as Python recurses
        return "nested too deeply to read"
    return in_json_words(str(error))  # a seed's ValidationError too (a NewPet's is told apart)


def _malformed(reason: str) -> Refused:
    return Refused(400, ErrorCode.MALFORMED_JSON, f"Body is not JSON: {reason}")
