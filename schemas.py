"""Wire types of the petstore interface and the OpenAPI document built from them (no I/O)."""

from __future__ import annotations

import decimal
import enum
from typing import Annotated, Any, Final

import msgspec

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

LIMIT_MIN: Final = 1
LIMIT_MAX: Final = 100
LIMIT_DEFAULT: Final = 20

# getPet is deprecated (SPEC.md 4.3). Deprecation (RFC 9745) carries the date we announced it,
# 2026-01-01T00:00:00Z; Sunset (RFC 8594) the removal date SPEC.md gives.
DEPRECATION: Final = "@1767225600"
SUNSET: Final = "Thu, 05 Dec 2030 00:00:00 GMT"
SUCCESSOR_PATH: Final = "/v1/pets"

BEARER_REALM: Final = "petstore"


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


class CategoryId(int):
    """An int64 as JSON Schema counts integers: `1.0` is the integer 1, `true` and `"1"` are not.

    msgspec alone is stricter (it refuses `1.0`), so `decode_hook` below does the checking.
    """


Name = Annotated[str, msgspec.Meta(min_length=1, description="The animal's name")]
StoredCategoryId = Annotated[
    int,
    msgspec.Meta(
        ge=INT64_MIN,
        le=INT64_MAX,
        description="Id of the category the animal belongs to",
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
    id: PetId | msgspec.UnsetType = msgspec.UNSET


class Error(msgspec.Struct, frozen=True):
    """The body of every response that is not 2xx; `status` repeats the HTTP status."""

    code: ErrorCode
    message: Annotated[str, msgspec.Meta(description="What went wrong, for a person")]
    status: Annotated[
        int, msgspec.Meta(ge=400, le=599, description="The HTTP status of the response")
    ]


_JSON_TYPE_NAMES: Final = {
    type(None): "null",
    bool: "bool",
    str: "str",
    float: "float",
    decimal.Decimal: "float",
    list: "array",
    dict: "object",
}


def decode_hook(type_: type, value: Any) -> Any:
    """Turn a decoded JSON value into a `CategoryId`, in msgspec's own wording when it can't.

    Numbers with a fraction or exponent arrive as exact Decimals (the decoders' float_hook), so
    `1.0` and `1e2` are integers while `1.0000000000000001` is not, as JSON Schema counts them.
    """
    if type_ is not CategoryId:
        raise NotImplementedError(type_)
    if type(value) is decimal.Decimal:
        if value != value.to_integral_value():
            raise TypeError("Expected `int`, got `float`")
    elif type(value) is not int:
        raise TypeError(f"Expected `int`, got `{_JSON_TYPE_NAMES.get(type(value), 'value')}`")
    # Checked before the int is made, so that 1e999999999 costs nothing.
    if value < INT64_MIN:
        raise ValueError(f"Expected `int` >= {INT64_MIN}")
    if value > INT64_MAX:
        raise ValueError(f"Expected `int` <= {INT64_MAX}")
    return CategoryId(value)


def _schema_hook(type_: type) -> dict[str, Any]:
    if type_ is CategoryId:
        return {
            "type": "integer",
            "format": "int64",
            "minimum": INT64_MIN,
            "maximum": INT64_MAX,
            "description": "Id of the category the animal belongs to",
        }
    raise NotImplementedError(type_)


new_pet_decoder: Final = msgspec.json.Decoder(
    NewPet, dec_hook=decode_hook, float_hook=decimal.Decimal
)
pet_decoder: Final = msgspec.json.Decoder(Pet)
seed_decoder: Final = msgspec.json.Decoder(
    list[SeedPet], dec_hook=decode_hook, float_hook=decimal.Decimal
)
# Any JSON text at all, numbers of any size (to tell "not JSON" from "not a NewPet").
any_json_decoder: Final = msgspec.json.Decoder(float_hook=decimal.Decimal)
encoder: Final = msgspec.json.Encoder()


def openapi_document(root_path: str = "") -> dict[str, Any]:
    """The OpenAPI 3.1 description of the three operations, schemas generated from the types."""
    ref = "#/components/schemas/{name}"
    (new_pet_ref, pet_ref, error_ref), schemas = msgspec.json.schema_components(
        [NewPet, Pet, Error], ref_template=ref, schema_hook=_schema_hook
    )
    for schema in schemas.values():  # msgspec leaves the type of an enumeration implicit
        if "enum" in schema:
            schema["type"] = "string"
    status_ref = {"$ref": ref.format(name="PetStatus")}
    int64 = {"type": "integer", "format": "int64"}

    def json_content(schema: dict[str, Any]) -> dict[str, Any]:
        return {"application/json": {"schema": schema}}

    def error(description: str, *codes: ErrorCode, headers: dict[str, Any] | None = None) -> Any:
        # Every error response is the one Error schema, so that a generated client has one
        # error type; the codes a response can carry are named in its description.
        names = ", ".join(f"`{code.value}`" for code in codes)
        response: dict[str, Any] = {
            "description": f"{description} (code {names})",
            "content": json_content(error_ref),
        }
        if headers:
            response["headers"] = headers
        return response

    def header_ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/headers/{name}"}

    unauthorized = error(
        "Credential missing or invalid",
        ErrorCode.UNAUTHORIZED,
        headers={"WWW-Authenticate": header_ref("WWW-Authenticate")},
    )
    internal = error("Unexpected failure; the log has the details", ErrorCode.INTERNAL_ERROR)
    validation = error("A parameter holds an invalid value", ErrorCode.VALIDATION_ERROR)
    deprecation_headers = {
        "Deprecation": header_ref("Deprecation"),
        "Sunset": header_ref("Sunset"),
        "Link": header_ref("SuccessorLink"),
    }

    def deprecated(response: dict[str, Any]) -> dict[str, Any]:
        return {**response, "headers": {**response.get("headers", {}), **deprecation_headers}}

    list_pets = {
        "operationId": "listPets",
        "summary": "List animals, a page at a time, in ascending id order",
        "description": "A page of at most `limit` animals, in ascending id order, optionally "
        'only those with one `status`. When more follow, the `Link` header (rel="next") '
        "holds the URL of the next page.",
        "tags": ["animals"],
        "parameters": [
            {
                "name": "limit",
                "in": "query",
                "required": False,
                "description": "Maximum number of animals returned",
                "schema": {
                    "type": "integer",
                    "minimum": LIMIT_MIN,
                    "maximum": LIMIT_MAX,
                    "default": LIMIT_DEFAULT,
                },
            },
            {
                "name": "status",
                "in": "query",
                "required": False,
                "description": "Only animals with this status",
                "schema": status_ref,
            },
            {
                "name": "after",
                "in": "query",
                "required": False,
                "description": "Return the page that follows this id (exclusive)",
                "schema": {**int64, "minimum": 0, "maximum": INT64_MAX},
            },
        ],
        "responses": {
            "200": {
                "description": "A page of animals",
                "headers": {"Link": header_ref("NextLink")},
                "content": json_content({"type": "array", "items": pet_ref}),
            },
            "400": validation,
            "401": unauthorized,
            "500": internal,
        },
    }
    create_pet = {
        "operationId": "createPet",
        "summary": "Add an animal",
        "description": "Stores a NewPet under the next id and answers the Pet, with its "
        "`Location`. An omitted `status` stays omitted.",
        "tags": ["animals"],
        "requestBody": {"required": True, "content": json_content(new_pet_ref)},
        "responses": {
            "201": {
                "description": "The animal as stored, with its id",
                "headers": {"Location": header_ref("Location")},
                "content": json_content(pet_ref),
            },
            "400": error(
                "The body is not JSON, or not a NewPet",
                ErrorCode.MALFORMED_JSON,
                ErrorCode.VALIDATION_ERROR,
            ),
            "401": unauthorized,
            "413": error("The body is over the size limit", ErrorCode.PAYLOAD_TOO_LARGE),
            "415": error("The body is not JSON", ErrorCode.UNSUPPORTED_MEDIA_TYPE),
            "500": internal,
            "503": error("The store can't take writes", ErrorCode.STORAGE_UNAVAILABLE),
        },
    }
    get_pet = {
        "operationId": "getPet",
        "summary": "Fetch one animal by id",
        "description": "Deprecated: removed on 5 December 2030. Use listPets with `status`.",
        "deprecated": True,
        "tags": ["animals"],
        "parameters": [
            {
                "name": "petId",
                "in": "path",
                "required": True,
                "description": "Id of the animal",
                "schema": {**int64},
            },
        ],
        "responses": {
            "200": deprecated({"description": "The animal", "content": json_content(pet_ref)}),
            "400": deprecated(error("petId is not an int64", ErrorCode.VALIDATION_ERROR)),
            "401": deprecated(unauthorized),
            "404": deprecated(error("No animal has this id", ErrorCode.NOT_FOUND)),
            "500": deprecated(internal),
        },
    }

    def string_header(description: str, **schema: Any) -> dict[str, Any]:
        return {"description": description, "schema": {"type": "string", **schema}}

    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Petstore",
            "version": "1.0.0",
            "description": "List, add and fetch the animals of a store.",
            "license": {"name": "MIT", "identifier": "MIT"},
        },
        "servers": [{"url": f"{root_path}/v1"}],
        "tags": [{"name": "animals", "description": "The store's animals"}],
        "security": [{"bearerAuth": []}],
        "paths": {
            "/pets": {"get": list_pets, "post": create_pet},
            "/pets/{petId}": {"get": get_pet},
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "Authorization: Bearer <API key>",
                }
            },
            "headers": {
                "WWW-Authenticate": {
                    **string_header("RFC 6750 challenge"),
                    "required": True,
                },
                "Location": {**string_header("Path of the new animal"), "required": True},
                "NextLink": string_header(
                    'RFC 8288 link to the next page, rel="next"; absent on the last page'
                ),
                "Deprecation": {
                    **string_header("RFC 9745 deprecation date", const=DEPRECATION),
                    "required": True,
                },
                "Sunset": {
                    **string_header("RFC 8594 removal date", const=SUNSET),
                    "required": True,
                },
                "SuccessorLink": {
                    **string_header('RFC 8288 link, rel="successor-version"'),
                    "required": True,
                },
            },
        },
    }
