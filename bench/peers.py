"""The service's peers in `make bench`: a bare ASGI app, plain Starlette + msgspec, FastAPI.

Each keeps pets in memory, checks the bearer key and validates as the service does, with no
access log, metrics or request ids: `uvicorn bench.peers:NAME` serves `bare`, `plain` or
`fastapi_app`.
"""

from __future__ import annotations

import bisect
import enum
import hmac
import json
from typing import Annotated, Any

import msgspec
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi import Response as FastResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

KEY = b"Bearer bench-key-0123456789"
PETS: list[dict[str, Any]] = []
BY_STATUS: dict[str | None, list[dict[str, Any]]] = {
    None: PETS,
    "available": [],
    "pending": [],
    "sold": [],
}


def authorized(headers: list[tuple[bytes, bytes]]) -> bool:
    value = next((v for k, v in headers if k == b"authorization"), b"")
    return hmac.compare_digest(value, KEY)


def page(limit: int, status: str | None) -> list[dict[str, Any]]:
    return BY_STATUS[status][:limit]


def get(pet_id: int) -> dict[str, Any] | None:
    position = bisect.bisect_left(PETS, pet_id, key=lambda pet: pet["id"])
    return PETS[position] if position < len(PETS) and PETS[position]["id"] == pet_id else None


def add(pet: dict[str, Any]) -> dict[str, Any]:
    pet = {"id": len(PETS) + 1, **pet}
    PETS.append(pet)
    if "status" in pet:
        BY_STATUS[pet["status"]].append(pet)
    return pet


# ------------------------------------------------------------------ bare: ASGI, nothing else


async def bare(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The least work that gives the same answers."""
    if scope["type"] != "http":
        return
    status, body = 200, b""
    if not authorized(scope["headers"]):
        status, body = 401, b'{"code":"unauthorized","message":"no","status":401}'
    elif scope["method"] == "POST":
        message = await receive()
        status, body = 201, json.dumps(add(json.loads(message["body"]))).encode()
    elif scope["path"] == "/v1/pets":
        query = dict(part.split("=") for part in scope["query_string"].decode().split("&") if part)
        body = json.dumps(page(int(query.get("limit", 20)), query.get("status"))).encode()
    else:
        body = json.dumps(get(int(scope["path"].rsplit("/", 1)[1]))).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------ plain Starlette + msgspec


class Status(enum.Enum):
    AVAILABLE = "available"
    PENDING = "pending"
    SOLD = "sold"


class NewPet(msgspec.Struct, forbid_unknown_fields=True):
    name: Annotated[str, msgspec.Meta(min_length=1)]
    categoryId: int
    status: Status | msgspec.UnsetType = msgspec.UNSET


class MsgspecResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return msgspec.json.encode(content)


def error(status: int, code: str, headers: dict[str, str] | None = None) -> Response:
    return MsgspecResponse({"code": code, "message": code, "status": status}, status, headers)


REFUSED = {"WWW-Authenticate": 'Bearer realm="petstore", error="invalid_token"'}
DEPRECATED = {
    "Deprecation": "@1767225600",
    "Sunset": "Thu, 05 Dec 2030 00:00:00 GMT",
    "Link": '</v1/pets>; rel="successor-version"',
}


async def plain_pets(request: Request) -> Response:
    if not authorized(request.scope["headers"]):
        return error(401, "unauthorized", REFUSED)
    if request.method == "POST":
        if request.headers.get("content-type") != "application/json":
            return error(415, "unsupported_media_type")
        try:
            new = msgspec.json.decode(await request.body(), type=NewPet)
        except msgspec.DecodeError:
            return error(400, "validation_error")
        pet = add(msgspec.to_builtins(new))
        return MsgspecResponse(pet, 201, {"Location": f"/v1/pets/{pet['id']}"})
    try:
        limit = int(request.query_params.get("limit", "20"))
        status = request.query_params.get("status")
        if not 1 <= limit <= 100:
            raise ValueError(limit)
        pets = page(limit, Status(status).value if status else None)
    except ValueError:
        return error(400, "validation_error")
    link = f'</v1/pets?limit={limit}&after={pets[-1]["id"]}>; rel="next"' if pets else ""
    return MsgspecResponse(pets, headers={"Link": link} if link else None)


async def plain_pet(request: Request) -> Response:
    if not authorized(request.scope["headers"]):
        return error(401, "unauthorized", {**REFUSED, **DEPRECATED})
    pet = get(int(request.path_params["petId"]))
    return MsgspecResponse(pet, headers=DEPRECATED) if pet else error(404, "not_found", DEPRECATED)


plain = Starlette(
    routes=[
        Route("/v1/pets", plain_pets, methods=["GET", "POST"]),
        Route("/v1/pets/{petId}", plain_pet, methods=["GET"]),
    ]
)


# ------------------------------------------------------------------ FastAPI + pydantic


class Pydantic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    categoryId: int
    status: Status | None = None


class PydanticPet(Pydantic):
    id: int


async def check(
    credentials: Annotated[HTTPAuthorizationCredentials, Depends(HTTPBearer())],
) -> None:
    if not hmac.compare_digest(credentials.credentials.encode(), KEY.removeprefix(b"Bearer ")):
        raise HTTPException(401, "no", {"WWW-Authenticate": REFUSED["WWW-Authenticate"]})


# The idiomatic FastAPI app: the key checked by FastAPI's HTTPBearer (which, as the service's
# does, documents the scheme in its OpenAPI), pydantic models in and out, answers validated.
fastapi_app = FastAPI(dependencies=[Depends(check)])


@fastapi_app.get("/v1/pets", response_model=list[PydanticPet], response_model_exclude_none=True)
async def fastapi_list(
    response: FastResponse, limit: int = Query(20, ge=1, le=100), status: Status | None = None
) -> list[PydanticPet]:
    pets = page(limit, status.value if status else None)
    if pets:
        response.headers["Link"] = f'</v1/pets?limit={limit}&after={pets[-1]["id"]}>; rel="next"'
    return [PydanticPet(**pet) for pet in pets]


@fastapi_app.post(
    "/v1/pets", status_code=201, response_model=PydanticPet, response_model_exclude_none=True
)
async def fastapi_create(pet: Pydantic, response: FastResponse) -> PydanticPet:
    added = add(pet.model_dump(exclude_none=True, mode="json"))
    response.headers["Location"] = f"/v1/pets/{added['id']}"
    return PydanticPet(**added)


@fastapi_app.get("/v1/pets/{pet_id}", response_model=PydanticPet, response_model_exclude_none=True)
async def fastapi_get(pet_id: int, response: FastResponse) -> PydanticPet:
    if (pet := get(pet_id)) is None:
        raise HTTPException(404, "not_found", DEPRECATED)
    response.headers.update(DEPRECATED)
    return PydanticPet(**pet)
