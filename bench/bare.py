"""The bare baseline for bench/run.py: the benchmark's requests answered with the least work.

Where bench/ceiling.py does what app.py does (the SHA-256 key check, query parsing, 400s,
415s, a data file), this app does only what it must to send the same bytes as the service
for bench/run.py's requests: the key compared as bytes, pets kept as their JSON, a page made
by joining them. It is the "bare ASGI app" a user compares a service with: the fastest
answers uvicorn (httptools, uvloop) can send, so that service / bare says what everything
above uvicorn costs, the ceiling's work included.

    PYTHONPATH=bench BARE_API_KEY=KEY python -m uvicorn bench.bare:app \\
        --http httptools --loop uvloop --no-access-log --no-server-header --log-level warning

Requests it knows: GET /v1/pets/{id}, GET /v1/pets?limit=N[&status=S][&after=ID], POST
/v1/pets (a NewPet, decoded by schemas.new_pet_decoder), GET /readyz; a missing or wrong key
gets the service's 401. Anything else: a bare 404. Ids are 1, 2, 3 ...
"""

from __future__ import annotations

import bisect
import os
from typing import Final

from asgi import DEPRECATED, JSON, Headers, Message, Receive, Scope, Send

from schemas import (
    BEARER_REALM,
    Error,
    ErrorCode,
    Pet,
    PetStatus,
    encoder,
    new_pet_decoder,
)


def _refusal(challenge: str, message: str, deprecated: bool) -> Message:
    body = encoder.encode(Error(code=ErrorCode.UNAUTHORIZED, message=message, status=401))
    headers = [(b"www-authenticate", challenge.encode()), (b"content-length", b"%d" % len(body))]
    return {"body": body, "headers": [*headers, JSON, *(DEPRECATED if deprecated else ())]}


_MISSING: Final = f'Bearer realm="{BEARER_REALM}"'
_MISSING_TEXT: Final = "Missing credential: send Authorization: Bearer <API key>"
_REJECTED: Final = f'Bearer realm="{BEARER_REALM}", error="invalid_token"'
_REJECTED_TEXT: Final = "The API key is not accepted"
# (missing, getPet) -> the 401's body and headers, built once
_REFUSALS: Final = {
    (missing, get): _refusal(_MISSING if missing else _REJECTED, text, get)
    for missing, text in ((True, _MISSING_TEXT), (False, _REJECTED_TEXT))
    for get in (False, True)
}
_NOT_FOUND: Final = [(b"content-length", b"0")]


class Bare:
    """Pets as JSON bytes (pet id - 1 is the index), and per status, (id, JSON) in id order."""

    def __init__(self, key: str) -> None:
        self.authorization = b"Bearer " + key.encode()
        self.pets: list[bytes] = []
        self.by_status: dict[bytes, tuple[list[int], list[bytes]]] = {
            status.value.encode(): ([], []) for status in PetStatus
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            return
        path: str = scope["path"]
        if path == "/readyz":
            await _send(send, 200, b'{"status":"ready"}', [(b"content-length", b"18"), JSON])
            return
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        if authorization != self.authorization:
            missing = authorization is None or not authorization.startswith(b"Bearer ")
            refusal = _REFUSALS[missing, path.startswith("/v1/pets/")]
            await _send(send, 401, refusal["body"], refusal["headers"])
        elif path.startswith("/v1/pets/"):
            pet_id = int(path[9:])
            if 1 <= pet_id <= len(self.pets):
                body = self.pets[pet_id - 1]
                await _send(
                    send, 200, body, [(b"content-length", b"%d" % len(body)), JSON, *DEPRECATED]
                )
            else:
                await _send(send, 404, b"", _NOT_FOUND)
        elif path == "/v1/pets" and scope["method"] == "POST":
            await self.create(receive, send)
        elif path == "/v1/pets":
            await self.page(scope["query_string"], send)
        else:
            await _send(send, 404, b"", _NOT_FOUND)

    async def page(self, query: bytes, send: Send) -> None:
        limit, status, after = 20, b"", 0
        for part in query.split(b"&"):
            name, _, value = part.partition(b"=")
            if name == b"limit":
                limit = int(value)
            elif name == b"status":
                status = value
            elif name == b"after":
                after = int(value)
        if status:
            ids, pets = self.by_status[status]
            start = bisect.bisect_right(ids, after)
        else:
            pets, start = self.pets, min(after, len(self.pets))
        page = pets[start : start + limit]
        body = b"[" + b",".join(page) + b"]"
        headers = [(b"content-length", b"%d" % len(body)), JSON]
        if start + limit < len(pets):
            last = ids[start + limit - 1] if status else start + limit
            status_part = b"&status=" + status if status else b""
            link = b'</v1/pets?limit=%d%b&after=%d>; rel="next"' % (limit, status_part, last)
            headers.insert(0, (b"link", link))
        await _send(send, 200, body, headers)

    async def create(self, receive: Receive, send: Send) -> None:
        message = await receive()
        body: bytes = message.get("body", b"")
        while message.get("more_body"):
            message = await receive()
            body += message.get("body", b"")
        new_pet = new_pet_decoder.decode(body)  # the benchmark sends only valid ones
        pet_id = len(self.pets) + 1
        pet = Pet(
            id=pet_id, name=new_pet.name, categoryId=int(new_pet.categoryId), status=new_pet.status
        )
        answer = encoder.encode(pet)
        self.pets.append(answer)
        if isinstance(pet.status, PetStatus):
            ids, pets = self.by_status[pet.status.value.encode()]
            ids.append(pet_id)
            pets.append(answer)
        headers = [
            (b"location", b"/v1/pets/%d" % pet_id),
            (b"content-length", b"%d" % len(answer)),
            JSON,
        ]
        await _send(send, 201, answer, headers)


async def _lifespan(receive: Receive, send: Send) -> None:
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


async def _send(send: Send, status: int, body: bytes, headers: Headers) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


app: Final = Bare(os.environ.get("BARE_API_KEY", ""))
