"""`make bench`: requests per server CPU-second and latency, the service beside its peers.

Run from the repository root: `.venv/bin/python bench/run.py [--rounds 3] [--seconds 3]`.
Needs wrk (Debian: `apt-get install wrk`) and taskset. The servers run at once on core 0 and
take turns, a short wrk run each on core 1, so that a noisy neighbour hits them all alike.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
KEY: Final = "bench-key-0123456789"
ADMIN: Final = {"Authorization": "Bearer bench-admin-0123456789"}
PYTHON: Final = sys.executable
UVICORN: Final = [PYTHON, "-m", "uvicorn", "--http", "httptools", "--loop", "uvloop"]
SERVERS: Final = {
    "service": [PYTHON, "app.py", "--api-key", KEY],
    "service, no access log": [PYTHON, "app.py", "--api-key", KEY, "--log-level", "warning"],
    # The test-control plane on (its journal records every /v1 request), then the same with 100
    # idle tenants minted (serving() below): what tenants cost the configured keys' requests.
    "service, plane": [PYTHON, "app.py", "--api-key", KEY, "--admin-key", "bench-admin-0123456789"],
    "service, 100 tenants": [
        PYTHON,
        "app.py",
        "--api-key",
        KEY,
        "--admin-key",
        ADMIN["Authorization"].removeprefix("Bearer "),
    ],
    "plain Starlette": [*UVICORN, "--no-access-log", "--log-level", "warning", "bench.peers:plain"],
    "FastAPI": [*UVICORN, "--no-access-log", "--log-level", "warning", "bench.peers:fastapi_app"],
    "bare ASGI": [*UVICORN, "--no-access-log", "--log-level", "warning", "bench.peers:bare"],
}
SCENARIOS: Final = {
    "getPet": ("GET", "/v1/pets/42", KEY),
    "listPets 20": ("GET", "/v1/pets?limit=20", KEY),
    "listPets by status": ("GET", "/v1/pets?status=sold&limit=20", KEY),
    "createPet": ("POST", "/v1/pets", KEY),
    "the 401": ("GET", "/v1/pets", "wrong-key"),
}
STATUSES: Final = ("available", "pending", "sold")
LUA: Final = """
wrk.method = "{method}"
wrk.headers["Authorization"] = "Bearer {key}"
wrk.headers["Content-Type"] = "application/json"
if wrk.method == "POST" then wrk.body = '{{"name":"Rex","categoryId":1,"status":"sold"}}' end
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    """User and system time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def serving(command: list[str], extra: list[str], pets: int = 1000) -> Iterator[tuple[int, int]]:
    """A server on core 0 with `pets` pets added; its port and pid."""
    port = free_port()
    argv = ["taskset", "-c", "0", *command, "--port", str(port), *extra]
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not answers(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{command} did not start: {process.stderr.read().decode()}")  # type: ignore[union-attr]
            time.sleep(0.05)
        fill(port, pets)
        if command == SERVERS["service, 100 tenants"]:
            for _ in range(100):
                admin(port, "POST", "/_admin/tenants", {})
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(20)


def answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        connection.request("GET", "/v1/pets", headers={"Authorization": f"Bearer {KEY}"})
        return connection.getresponse().status == 200
    except OSError:
        return False


def fill(port: int, count: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port)
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
    for number in range(count):
        pet = {"name": f"pet{number}", "categoryId": 1, "status": STATUSES[number % 3]}
        connection.request("POST", "/v1/pets", json.dumps(pet), headers)
        connection.getresponse().read()


def admin(port: int, method: str, path: str, body: object = None) -> dict[str, object]:
    """One request to the test-control plane; its JSON answer."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    content = None if body is None else json.dumps(body)
    connection.request(method, path, content, {**ADMIN, "Content-Type": "application/json"})
    answer: dict[str, object] = json.loads(connection.getresponse().read() or b"{}")
    return answer


def wrk(port: int, pid: int, scenario: str, seconds: float, connections: int) -> dict[str, float]:
    """One wrk run: requests per server CPU-second, p50 and p99 in ms."""
    method, path, key = SCENARIOS[scenario]
    with tempfile.NamedTemporaryFile("w", suffix=".lua") as script:
        script.write(LUA.format(method=method, key=key))
        script.flush()
        before = cpu_seconds(pid)
        output = subprocess.run(
            ["taskset", "-c", "1", "wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--latency",
             "-s", script.name, f"http://127.0.0.1:{port}{path}"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        used = cpu_seconds(pid) - before
    requests = int(re.search(r"(\d+) requests in", output)[1])  # type: ignore[index]
    return {
        "rate": requests / used,
        "per_second": float(re.search(r"Requests/sec:\s+([\d.]+)", output)[1]),  # type: ignore[index]
        "p50": latency(output, "50%"),
        "p99": latency(output, "99%"),
    }


def latency(output: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", output).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def throughput(rounds: int, seconds: float, scenarios: list[str]) -> None:
    """The table of the floors: every server on every scenario, median of the rounds."""
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    with contextlib.ExitStack() as stack:  # all at once, taking turns: drift hits them alike
        running = {name: stack.enter_context(serving(argv, [])) for name, argv in SERVERS.items()}
        for _ in range(rounds):
            for scenario in scenarios:
                for server, (port, pid) in running.items():
                    run = wrk(port, pid, scenario, seconds, 16)
                    results.setdefault((scenario, server), []).append(run)
    print(f"\n{rounds} rounds of {seconds:g} s, wrk -t1 -c16; rate: requests per server CPU-second")
    print("| scenario | server | rate | / plain | / FastAPI | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    median = {
        key: {field: statistics.median(run[field] for run in runs) for field in runs[0]}
        for key, runs in results.items()
    }

    def over(scenario: str, server: str, peer: str) -> float:
        """The median of the rounds' ratios: each taken side by side, seconds apart."""
        pairs = zip(results[(scenario, server)], results[(scenario, peer)], strict=True)
        return statistics.median(run["rate"] / other["rate"] for run, other in pairs)

    for scenario in scenarios:
        for server in SERVERS:
            row = median[(scenario, server)]
            print(
                f"| {scenario} | {server} | {row['rate']:,.0f}"
                f" | {over(scenario, server, 'plain Starlette'):.2f}"
                f" | {over(scenario, server, 'FastAPI'):.2f}"
                f" | {row['p50']:.2f} | {row['p99']:.2f} |"
            )
    ratios = [
        median[(s, "service")]["p99"] / median[(s, "service, no access log")]["p99"]
        for s in scenarios
    ]
    print(
        f"\np99 access log on / off: median {statistics.median(ratios):.2f}, max {max(ratios):.2f}"
    )


def durability(seconds: float) -> None:
    """Durable creates with a data file scale with clients (group commit); a big file loads fast."""
    print("\n| clients | durable creates/s | p99 ms |\n|---|---|---|")
    quiet = SERVERS["service, no access log"]
    with tempfile.TemporaryDirectory() as folder:
        for clients in (1, 4, 16, 64):
            with serving(quiet, ["--data", f"{folder}/pets{clients}.jsonl"], 0) as (port, pid):
                run = wrk(port, pid, "createPet", seconds, clients)
            print(f"| {clients} | {run['per_second']:,.0f} | {run['p99']:.1f} |")
        path = Path(folder, "million.jsonl")
        with path.open("w") as file:
            for number in range(1, 1_000_001):
                file.write(f'{{"id":{number},"name":"pet{number}","categoryId":1}}\n')
        started = time.monotonic()
        with serving(quiet, ["--data", str(path)], 0):
            took = time.monotonic() - started
            print(f"\n1,000,000 pets in the data file: serving after {took:.2f} s")


def tenants() -> None:
    """What an empty tenant costs in memory, and how soon a wait for a request answers."""
    argv = [*SERVERS["service, 100 tenants"], "--log-level", "warning", "--max-tenants", "10000"]
    with serving(argv, [], 0) as (port, pid):
        before = resident(pid)
        for _ in range(5000):
            admin(port, "POST", "/_admin/tenants", {})
        each = (resident(pid) - before) / 5000
        print(f"\nAn empty tenant: {each / 1024:.1f} KiB resident (5,000 minted)")
        tenant = admin(port, "POST", "/_admin/tenants", {})
        waits, path = [], f"/_admin/tenants/{tenant['id']}/requests?atLeast=1&waitMs=10000"
        sender = http.client.HTTPConnection("127.0.0.1", port)
        headers = {"Authorization": f"Bearer {tenant['apiKey']}"}
        for _ in range(1000):
            admin(port, "DELETE", f"/_admin/tenants/{tenant['id']}/requests")
            reader = http.client.HTTPConnection("127.0.0.1", port)
            reader.request("GET", path, headers=ADMIN)
            time.sleep(0.002)  # the wait open before the request: not measured
            sender.request("GET", "/v1/pets", headers=headers)
            sender.getresponse().read()
            sent = time.perf_counter()  # the journal entry is made as its answer goes
            reader.getresponse().read()
            waits.append((time.perf_counter() - sent) * 1000)
        quantiles = statistics.quantiles(waits, n=100)
        print(
            f"A wait's answer after the request's: p50 {quantiles[49]:.2f} ms,"
            f" p99 {quantiles[98]:.2f} ms (1,000 waits)"
        )


def resident(pid: int) -> int:
    """The process's resident bytes."""
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    flags = argparse.ArgumentParser(description=__doc__)
    flags.add_argument("--rounds", type=int, default=5)
    flags.add_argument("--seconds", type=float, default=2)
    flags.add_argument("--scenario", action="append", choices=SCENARIOS, help="all by default")
    flags.add_argument("--no-durability", action="store_true", help="the throughput table only")
    args = flags.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()},"
          f" {os.cpu_count()} cores, Python {platform.python_version()}")  # fmt: skip
    throughput(args.rounds, args.seconds, args.scenario or list(SCENARIOS))
    if not args.no_durability:
        durability(args.seconds)
        tenants()


if __name__ == "__main__":
    main()
