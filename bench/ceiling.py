"""The ceiling for bench/run.py: the petstore's three operations as a bare ASGI app.

No framework, no middleware, no routing table: the least work that still answers the same
bytes as the service (app.py) for the benchmark's requests, so that "service / ceiling" says
what the service's own code costs on top of uvicorn, msgspec and the store's data structures.

    PYTHONPATH=bench CEILING_API_KEY=KEY [CEILING_DATA=FILE] python -m uvicorn bench.ceiling:app \\
        --http httptools --loop uvloop --no-access-log --no-server-header --log-level warning

What it does, as app.py does it:

- every path under /v1/: `Authorization: Bearer <key>` checked first (SHA-256 digests compared
  with hmac.compare_digest, every key every time); 401 Error JSON and `WWW-Authenticate`;
- GET /v1/pets?limit=N[&status=S][&after=ID]: a page in ascending id, `Link: ...; rel="next"`
  when more follow;
- POST /v1/pets: a NewPet decoded strictly (schemas.new_pet_decoder), 201, Location, the Pet;
  with CEILING_DATA set, each 201 waits for its JSON line to be written and fdatasynced, in
  group commits (one fdatasync for every create that arrived while the previous one ran);
- GET /v1/pets/{id}: the Pet, or 404; Deprecation, Sunset and the successor Link on every answer;
- GET /readyz and /healthz: 200 (bench/common.py waits for /readyz).

What it skips: percent-decoding of the query, repeated query parameters, the body size limit,
root paths, the stall guard, loading a data file at start. Bad input gets a 400/404/405/415
Error, not necessarily worded as the service words it. Ids are 1, 2, 3 ... so a pet's id is its
position plus one; pets of each status are kept in a list of their own, found by bisection.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import hmac
import operator
import os
from typing import Final

import msgspec
from asgi import DEPRECATED, JSON, Headers, Receive, Scope, Send

from schemas import (
    BEARER_REALM,
    INT64_MAX,
    LIMIT_DEFAULT,
    LIMIT_MAX,
    Error,
    ErrorCode,
    Pet,
    PetStatus,
    encoder,
    new_pet_decoder,
)

_STATUSES: Final = {status.value.encode(): status for status in PetStatus}
_PET_ID: Final = operator.attrgetter("id")


def _error(status: int, code: ErrorCode, message: str) -> bytes:
    return encoder.encode(Error(code=code, message=message, status=status))


def _unauthorized(challenge: str, message: str) -> tuple[bytes, Headers]:
    body = _error(401, ErrorCode.UNAUTHORIZED, message)
    headers = [(b"www-authenticate", challenge.encode()), (b"content-length", b"%d" % len(body))]
    return body, [*headers, JSON]


# The two 401s, built once: no key (or another scheme), and a key that is not accepted.
_MISSING: Final = _unauthorized(
    f'Bearer realm="{BEARER_REALM}"', "Missing credential: send Authorization: Bearer <API key>"
)
_REJECTED: Final = _unauthorized(
    f'Bearer realm="{BEARER_REALM}", error="invalid_token"', "The API key is not accepted"
)


class _Log:
    """The data file: JSON lines appended and fdatasynced, many creates to one fdatasync."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self.flusher: asyncio.Task[None] | None = None  # held: the loop keeps weak references
        self.failure: OSError | None = None  # after a failed write, every append fails

    async def append(self, line: bytes) -> None:
        if self.failure is not None:
            raise self.failure
        done = asyncio.get_running_loop().create_future()
        self.pending.append((line, done))
        if self.flusher is None:
            self.flusher = asyncio.get_running_loop().create_task(self._flush())
        await done

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]
        os.fdatasync(self.fd)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self.pending:
                batch, self.pending = self.pending, []
                try:
                    await loop.run_in_executor(None, self._write, b"".join(b[0] for b in batch))
                except OSError as error:
                    self.failure = error
                    for _, done in [*batch, *self.pending]:
                        if not done.done():
                            done.set_exception(error)
                    self.pending = []
                    return
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)
        finally:
            self.flusher = None


class Ceiling:
    """The app: keys, pets, and the optional data file."""

    def __init__(self, keys: list[str], data: str | None) -> None:
        self.digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        self.pets: list[Pet] = []
        self.by_status: dict[PetStatus, list[Pet]] = {status: [] for status in PetStatus}
        self.log = _Log(data) if data else None
        self.last_id = 0

    def authorized(self, headers: Headers) -> tuple[bytes, Headers] | None:
        """None when the request carries an accepted key, else the 401 to answer."""
        authorization = b""
        for name, value in headers:
            if name == b"authorization":
                authorization = value
                break
        scheme, _, token = authorization.partition(b" ")
        token = token.strip(b" \t")
        if scheme.lower() != b"bearer" or not token:
            return _MISSING
        digest = hashlib.sha256(token).digest()
        accepted = False
        for known in self.digests:
            accepted |= hmac.compare_digest(digest, known)
        return None if accepted else _REJECTED

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await _lifespan(receive, send)
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith("/v1/"):
            getting_pet = method == "GET" and path.startswith("/v1/pets/")
            refused = self.authorized(scope["headers"])
            if refused is not None:
                body, headers = refused
                await _answer(send, 401, body, [*headers, *DEPRECATED] if getting_pet else headers)
            elif path == "/v1/pets":
                if method == "GET":
                    await self.list_pets(scope, send)
                elif method == "POST":
                    await self.create_pet(scope, receive, send)
                else:
                    await _refuse(send, 405, ErrorCode.METHOD_NOT_ALLOWED, "Use GET or POST")
            elif getting_pet and "/" not in path[9:]:
                await self.get_pet(path[9:], send)
            else:
                await _refuse(send, 404, ErrorCode.NOT_FOUND, "No resource at this path")
        elif path in ("/readyz", "/healthz"):
            await _answer(send, 200, b'{"status":"ready"}', [])
        else:
            await _refuse(send, 404, ErrorCode.NOT_FOUND, "No resource at this path")

    async def list_pets(self, scope: Scope, send: Send) -> None:
        limit, status, after = LIMIT_DEFAULT, None, 0
        query: bytes = scope["query_string"]
        for part in query.split(b"&") if query else ():
            name, _, value = part.partition(b"=")
            if name == b"limit":
                if not value.isdigit() or not 1 <= int(value) <= LIMIT_MAX:
                    return await _refuse(send, 400, ErrorCode.VALIDATION_ERROR, "Bad `limit`")
                limit = int(value)
            elif name == b"status":
                if (status := _STATUSES.get(value)) is None:
                    return await _refuse(send, 400, ErrorCode.VALIDATION_ERROR, "Bad `status`")
            elif name == b"after":
                if not value.isdigit() or int(value) > INT64_MAX:
                    return await _refuse(send, 400, ErrorCode.VALIDATION_ERROR, "Bad `after`")
                after = int(value)
        if status is None:  # ids are positions + 1: the page after `after` starts at `after`
            pets = self.pets
            start = min(after, len(pets))
        else:
            pets = self.by_status[status]
            start = bisect.bisect_right(pets, after, key=_PET_ID)
        page = pets[start : start + limit]
        body = encoder.encode(page)
        headers = [(b"content-length", b"%d" % len(body)), JSON]
        if start + limit < len(pets):
            status_part = f"&status={status.value}" if status else ""
            link = f'</v1/pets?limit={limit}{status_part}&after={page[-1].id}>; rel="next"'
            headers.insert(0, (b"link", link.encode()))
        await _answer(send, 200, body, headers)

    async def create_pet(self, scope: Scope, receive: Receive, send: Send) -> None:
        content_type = b""
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = value
                break
        if content_type.partition(b";")[0].strip().lower() != b"application/json":
            await _refuse(send, 415, ErrorCode.UNSUPPORTED_MEDIA_TYPE, "Send application/json")
            return
        message = await receive()
        body: bytes = message.get("body", b"")
        while message.get("more_body"):
            message = await receive()
            body += message.get("body", b"")
        try:
            new_pet = new_pet_decoder.decode(body)
        except msgspec.ValidationError as error:
            await _refuse(send, 400, ErrorCode.VALIDATION_ERROR, str(error))
            return
        except (msgspec.DecodeError, UnicodeDecodeError) as error:
            await _refuse(send, 400, ErrorCode.MALFORMED_JSON, f"Body is not JSON: {error}")
            return
        self.last_id += 1
        pet = Pet(
            id=self.last_id,
            name=new_pet.name,
            categoryId=int(new_pet.categoryId),
            status=new_pet.status,
        )
        body = encoder.encode(pet)
        if self.log is not None:  # listed once its line is on disk, as in the service
            try:
                await self.log.append(body + b"\n")
            except OSError as error:  # and every create after it: ids stay positions + 1
                await _refuse(send, 503, ErrorCode.STORAGE_UNAVAILABLE, str(error))
                return
        self.pets.append(pet)
        if isinstance(pet.status, PetStatus):
            self.by_status[pet.status].append(pet)
        headers = [
            (b"location", b"/v1/pets/%d" % pet.id),
            (b"content-length", b"%d" % len(body)),
            JSON,
        ]
        await _answer(send, 201, body, headers)

    async def get_pet(self, text: str, send: Send) -> None:
        if not text.lstrip("-").isdigit() or len(text.lstrip("-")) > 19:
            body = _error(400, ErrorCode.VALIDATION_ERROR, "petId must be an int64")
            status = 400
        elif 1 <= (pet_id := int(text)) <= len(self.pets):
            body = encoder.encode(self.pets[pet_id - 1])
            status = 200
        else:
            body = _error(404, ErrorCode.NOT_FOUND, f"No pet has id {pet_id}")
            status = 404
        headers = [(b"content-length", b"%d" % len(body)), JSON, *DEPRECATED]
        await _answer(send, status, body, headers)


async def _answer(send: Send, status: int, body: bytes, headers: Headers) -> None:
    if not headers:
        headers = [(b"content-length", b"%d" % len(body)), JSON]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse(send: Send, status: int, code: ErrorCode, message: str) -> None:
    body = _error(status, code, message)
    await _answer(send, status, body, [(b"content-length", b"%d" % len(body)), JSON])


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def _from_environment() -> Ceiling:
    keys = [key.strip() for key in os.environ.get("CEILING_API_KEY", "").split(",") if key.strip()]
    if not keys:
        raise SystemExit("bench.ceiling: set CEILING_API_KEY (one key, or several comma-separated)")
    return Ceiling(keys, os.environ.get("CEILING_DATA") or None)


app: Final = _from_environment()
