"""Instructions per request of the whole stack in one process, nothing left to the clock.

Run from the repository root:

    .venv/bin/python bench/stack.py [--scenario get,get6,...] [--config default,...]

bench/instructions.py counts a server under load from wrk, and two of its runs of one tree
differ by 1-3k instructions a request: what runs on a timer (the access log's drain, the
metrics' fold) runs by the wall clock, tens of times as often a request under callgrind, and
the ceiling, which runs no timer, still moved by 1.5k. This counts the same stack in one
process, with nothing left to the clock: uvicorn's protocol as the service runs it
(StallGuard, QuickHead, OneWrite, uvloop), the app create_app builds, a socket pair, and a
client in the same event loop that sends a request and reads its answer, again and again;
every 256 requests it drains the access log and folds the metrics, as the lifespan's tasks
do every 50 ms. Callgrind's counters are zeroed after a warm-up and dumped after --requests
more: their total over --requests is a request's instructions, the client's included (about
a fifth), with PYTHONHASHSEED=0; two runs of one tree agree within about 700.

Good for telling what a change of a thousand instructions or more did, and what each feature
costs (the configurations differ by one setting each); not for comparing with the ceiling or
the bare app (the client's share), nor for time (bench/run.py). Needs valgrind.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from common import BenchError, callgrind_control, newest_total

ROOT: Final = Path(__file__).resolve().parent.parent
KEY: Final = "bench-key-0123456789"
ADMIN_KEY: Final = "bench-admin-key-0123456789"
# Each configuration: the default service but for one setting.
CONFIGS: Final[dict[str, dict[str, object]]] = {
    "default": {},
    "log off": {"log": False},
    "metrics off": {"metrics": False},
    "plane on": {"admin_keys": (ADMIN_KEY,)},
}
_HOST_AND_KEY: Final = b"Host: x\r\nAuthorization: Bearer %s\r\n" % KEY.encode()
# The four more headers httpx sends.
_HTTPX: Final = (
    b"Accept: */*\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n"
    b"User-Agent: python-httpx/0.28.1\r\n"
)
_PET: Final = b'{"name":"Rex","categoryId":1}'
SCENARIOS: Final = {
    "get": ("getPet, 2 headers (wrk's)", b"GET /v1/pets/1 HTTP/1.1\r\n%s\r\n" % _HOST_AND_KEY),
    "get6": (
        "getPet, 6 headers (httpx's)",
        b"GET /v1/pets/1 HTTP/1.1\r\n%s%s\r\n" % (_HOST_AND_KEY, _HTTPX),
    ),
    "list20": ("listPets limit=20", b"GET /v1/pets?limit=20 HTTP/1.1\r\n%s\r\n" % _HOST_AND_KEY),
    "unauthorized": (
        "401 (wrong key)",
        b"GET /v1/pets/1 HTTP/1.1\r\n%s\r\n" % _HOST_AND_KEY.replace(KEY.encode(), b"wrong"),
    ),
    "create": (
        "createPet, memory",
        b"POST /v1/pets HTTP/1.1\r\n%sContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (_HOST_AND_KEY, len(_PET), _PET),
    ),
}
FILL: Final = 20  # pets created first: listPets 20 lists 20
WARMUP: Final = 300
_LENGTH: Final = re.compile(rb"content-length: (\d+)", re.IGNORECASE)


def serve(config: str, scenario: str, requests: int) -> None:
    """The counted process: FILL creates and WARMUP requests, then, told to go on its standard
    input (callgrind's counters zeroed), `requests` more, then a line on its output and a
    wait for its input to end (the counters dumped)."""
    sys.path.insert(0, str(ROOT))
    import uvicorn  # noqa: PLC0415 - the counted process alone imports the service
    import uvloop  # noqa: PLC0415
    from uvicorn.server import ServerState  # noqa: PLC0415

    from app import create_app  # noqa: PLC0415
    from protocol import http_protocol  # noqa: PLC0415
    from settings import Settings  # noqa: PLC0415
    from store import MemoryStore  # noqa: PLC0415

    chosen = dict(CONFIGS[config])
    stream = io.StringIO() if chosen.pop("log", True) else None
    settings = Settings(api_keys=(KEY,), **chosen)  # type: ignore[arg-type] # one setting
    request = SCENARIOS[scenario][1]

    async def run() -> None:
        store = MemoryStore()
        petstore = create_app(settings, store, access_log=stream)
        await store.open()
        log = petstore.access_log
        protocol = http_protocol(settings, log.note_refusal)
        server = uvicorn.Config(petstore, http=protocol, lifespan="off", log_config=None)
        server.load()
        state = ServerState()
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        theirs.setblocking(False)
        await loop.connect_accepted_socket(
            lambda: protocol(config=server, server_state=state, app_state={}), ours
        )

        for _ in range(FILL):
            await exchange(theirs, SCENARIOS["create"][1])
        for done in range(1, WARMUP + requests + 1):
            if done == WARMUP + 1:  # the loop waits: nothing else runs
                print("warm", flush=True)
                sys.stdin.readline()
            await exchange(theirs, request)
            if done % 256 == 0:  # what the lifespan's tasks do every 50 ms
                if stream is not None:
                    await log.drain()
                    stream.seek(0)
                    stream.truncate()
                if log.counts is not None:
                    log.counts.fold()
        print("done", flush=True)
        sys.stdin.read()

    uvloop.run(run())


async def exchange(client: socket.socket, request: bytes) -> None:
    """Send a request and read its answer whole."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(client, request)
    received = b""
    while b"\r\n\r\n" not in received:
        received += await loop.sock_recv(client, 65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = _LENGTH.search(head)
    assert length is not None, head
    while len(body) < int(length[1]):
        body += await loop.sock_recv(client, 65536)


def count(valgrind: str, config: str, scenario: str, requests: int, dumps: Path) -> int:
    """Instructions of `requests` requests in one counted process."""
    argv = [valgrind, "--tool=callgrind", f"--callgrind-out-file={dumps}/callgrind.%p"]
    argv += [sys.executable, __file__, "--serve", config, scenario, str(requests)]
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    with (
        (dumps / "stderr").open("w+") as errors,
        subprocess.Popen(  # noqa: S603 - our own argv, no shell
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=environment,
            text=True,
        ) as process,
    ):
        assert process.stdin is not None and process.stdout is not None
        try:
            for said, then in (("warm", "--zero"), ("done", "--dump")):
                if process.stdout.readline() != f"{said}\n":
                    errors.seek(0)
                    raise BenchError(f"{config}, {scenario}: {errors.read()[-2000:]}")
                callgrind_control(then, str(process.pid))
                if then == "--zero":
                    process.stdin.write("go\n")
                    process.stdin.flush()
        finally:
            process.stdin.close()
    return newest_total(dumps, process.pid)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/stack.py", description="Instructions per request, the whole stack, one process."
    )
    parser.add_argument("--scenario", default=",".join(SCENARIOS), help=", ".join(SCENARIOS))
    parser.add_argument("--config", default=",".join(CONFIGS), help=", ".join(CONFIGS))
    parser.add_argument("--requests", type=int, default=1000, help="counted requests")
    parser.add_argument("--serve", nargs=3, help=argparse.SUPPRESS)
    flags = parser.parse_args(argv)
    if flags.serve:
        config, scenario, requests = flags.serve
        serve(config, scenario, int(requests))
        return 0
    scenarios = [name.strip() for name in flags.scenario.split(",")]
    configs = [name.strip() for name in flags.config.split(",")]
    unknown = [s for s in scenarios if s not in SCENARIOS] + [
        c for c in configs if c not in CONFIGS
    ]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    valgrind = shutil.which("valgrind")
    if valgrind is None or shutil.which("callgrind_control") is None:
        print("bench: valgrind is not installed: `apt-get install valgrind`", file=sys.stderr)
        return 2
    print(f"{'scenario':<28}" + "".join(f"{config:>14}" for config in configs))
    with tempfile.TemporaryDirectory(prefix="petstore-stack-") as dumps:
        for scenario in scenarios:
            row = f"{SCENARIOS[scenario][0]:<28}"
            for config in configs:
                try:
                    total = count(valgrind, config, scenario, flags.requests, Path(dumps))
                except BenchError as error:
                    print(f"\nbench: {error}", file=sys.stderr)
                    return 2
                row += f"{total // flags.requests:>14,}"
            print(row, flush=True)
    print(
        f"Instructions per request (callgrind, {flags.requests} requests over one connection, "
        "the client's in the same process included; PYTHONHASHSEED=0)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
