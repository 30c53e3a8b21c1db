"""Throughput benchmark of the petstore against its ceiling, then memory and scale.

Run from the repository root (`make bench` runs it, then bench/durability.py):

    .venv/bin/python bench/run.py [--rounds 5] [--duration 1] [--scenario NAME ...] [--quick]

It needs wrk (Debian: `apt-get install wrk`) and, for a core each, taskset (util-linux). About
three minutes with the defaults; --quick (2 rounds) about half that; --scenario picks a subset
(names below, and `scale` for part 2).

1. Service vs. ceiling. The ceiling (bench/ceiling.py) is a bare ASGI app that answers the
   same three operations with the same auth check and the same bytes, and no framework: the
   least work uvicorn, msgspec and the store's data structures allow. Both run under the same
   uvicorn settings (httptools, uvloop, one process, no uvicorn access log, no Server header):
   the service as `python app.py`, the ceiling as `python -m uvicorn bench.ceiling:app`. All
   servers are pinned to core 0, wrk (and this script) to core 1. Every server gets the same
   1,000 pets first (POSTs; status cycling available, pending, sold, absent), then each
   scenario's request is sent to every server and the answers must match (status and body,
   else the run stops; headers but `date`, else a warning), so that the comparison is apples
   to apples. Scenarios, each `wrk -t1 -c32` (32 connections, also for the file store):

       get            GET /v1/pets/{id}, ids 1..1000 in turn
       list20         GET /v1/pets?limit=20
       list20-status  GET /v1/pets?limit=20&status=available
       list100        GET /v1/pets?limit=100
       unauthorized   GET /v1/pets?limit=20 with a wrong key (401)
       create-memory  POST /v1/pets, in-memory store
       create-file    POST /v1/pets, data file (fdatasync before each 201; the ceiling does
                      the same with group commit)

   Per scenario: a warm-up run per server, then --rounds rounds; a round loads the service
   with its access log on (the default, log level info, lines to a file), the ceiling, and the
   service with its access log off (--log-level warning), --duration seconds each, in that
   order and reversed in the next round, so that the ceiling's run is next to each service
   run. The ratio service / ceiling is taken pair by pair (a service run and the ceiling run
   beside it) and the median reported, "pairs" showing the lowest and highest: machine noise
   that lasts a few seconds hits both members of a pair, and the median drops a pair that a
   burst hit on one side only. Short runs and many rounds keep the pairs close. The machine
   may be shared, so each server's CPU time (/proc/PID/stat utime + stime) is read around each
   run too: "req/CPU-s" (answers per second of server CPU) stays steady when other processes
   take turns on the server's core and wall-clock req/s drop, and "busy" (server CPU / wall
   time) says whether the server had its core to itself. Neither sees a host that runs this
   VM's CPUs slower for a while (noisy neighbours): only the pairs cancel that. req/s and
   req/CPU-s are medians over the rounds; p50/p99 are over every request of every round.
   Two tables: access log on, access log off. Targets (service / ceiling, median of pairs):
   >= 0.75 for get, list20, list20-status and unauthorized, >= 0.65 for create-memory.

2. Memory and scale (scenario `scale`; the service with --log-level warning on data files
   written by this script). Resident bytes per pet: VmRSS of the service once ready on a
   1,000,000-pet file, minus VmRSS on an empty one, over 1,000,000 (target < 200). listPets
   latency, `wrk -t1 -c1` (one request at a time: the cost of a request, no queueing), with
   1,000,000 pets vs. 1,000, 3 rounds alternating between the two servers: limit 20; limit 20
   with status=available; and both again deep in the pages (after = pets - 100, e.g.
   after=999900). Target: p50 with 1,000,000 pets within 1.5x of p50 with 1,000 (median of
   per-pair ratios; mean and p99 are shown, not judged).

Latencies are in milliseconds, timed per request by the wrk scripts (bench/request.lua,
bench/create_pet.lua), not taken from wrk's own statistics, which wrk "corrects" for
coordinated omission with made-up samples. getPet and createPet answers name their request
(the id, the pet's name), which pairs them exactly; for the other scenarios request.lua pairs
first in, first out, which against exact pairing on getPet agreed within about 4% at p50 and
1% at p99 (FIFO can't see a single request that waits while later ones are answered).
req/s counts only answers with the expected status (200, 201, 401); "errors" notes others.

Targets are reported, not enforced: the exit status is 0 after the tables, 2 when the
benchmark can't run (no wrk, a server that does not start, answers that differ). Every server
and wrk is stopped on the way out, also on error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Final

from common import (
    API_KEY,
    BENCH,
    CREATES,
    BenchError,
    Pinning,
    Server,
    Target,
    WrkRequests,
    WrkResult,
    free_port,
    pinning,
    prepare,
    print_table,
    run_wrk,
    serve,
    spawn,
    verdict,
    write_fixture,
    wrk_path,
)

REQUEST_SCRIPT: Final = BENCH / "request.lua"
CONNECTIONS: Final = 32
FILL: Final = 1000  # pets every server gets before timing
WRONG_KEY: Final = "not-the-key-0123456789"
STATUSES: Final = ("available", "pending", "sold", None)  # the fill cycles through these
BUSY_LOAD: Final = 0.5  # a 1-minute load average above this before the start: noisy numbers
BYTES_PER_PET_TARGET: Final = 200.0
SCALE_RATIO_TARGET: Final = 1.5
SMALL_STORE: Final = 1000
SCALE_CONNECTIONS: Final = 1

# The three servers of a scenario, in the order of even rounds (odd rounds reverse it).
LOG_ON: Final = "service, access log on"
CEILING: Final = "ceiling"
LOG_OFF: Final = "service, access log off"
ROUND_ORDER: Final = (LOG_ON, CEILING, LOG_OFF)


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Probe:
    """One request sent to every server before timing, whose answers must be the same."""

    method: str
    path: str
    key: str | None = API_KEY
    body: bytes | None = None


@dataclass(frozen=True)
class Scenario:
    name: str  # for --scenario
    title: str  # for the tables
    store: str  # "memory" or "file": which set of servers
    requests: WrkRequests
    probes: tuple[Probe, ...]
    target: float | None  # service/ceiling at least this, or None: shown, not judged


def _requests(status: int, path: str, key: str = API_KEY, ids: int = 0) -> WrkRequests:
    args = (key, str(status), "GET", path) + ((str(ids),) if ids else ())
    return WrkRequests(REQUEST_SCRIPT, "", args)


_CREATE_PROBE: Final = Probe(
    "POST", "/v1/pets", body=b'{"name":"bench-0","categoryId":1,"status":"sold"}'
)

SCENARIOS: Final = (
    Scenario(
        "get",
        "getPet (ids 1..1000)",
        "memory",
        _requests(200, "/v1/pets/{id}", ids=FILL),
        (Probe("GET", "/v1/pets/1"), Probe("GET", "/v1/pets/4"), Probe("GET", "/v1/pets/1000")),
        0.75,
    ),
    Scenario(
        "list20",
        "listPets limit=20",
        "memory",
        _requests(200, "/v1/pets?limit=20"),
        (Probe("GET", "/v1/pets?limit=20"),),
        0.75,
    ),
    Scenario(
        "list20-status",
        "listPets limit=20 status=available",
        "memory",
        _requests(200, "/v1/pets?limit=20&status=available"),
        (Probe("GET", "/v1/pets?limit=20&status=available"),),
        0.75,
    ),
    Scenario(
        "list100",
        "listPets limit=100",
        "memory",
        _requests(200, "/v1/pets?limit=100"),
        (Probe("GET", "/v1/pets?limit=100"), Probe("GET", "/v1/pets?limit=100&after=950")),
        None,
    ),
    Scenario(
        "unauthorized",
        "401 (wrong key)",
        "memory",
        _requests(401, "/v1/pets?limit=20", key=WRONG_KEY),
        (
            Probe("GET", "/v1/pets?limit=20", key=WRONG_KEY),
            Probe("GET", "/v1/pets?limit=20", key=None),
            Probe("GET", "/v1/pets/1", key=WRONG_KEY),
        ),
        0.75,
    ),
    Scenario("create-memory", "createPet, memory", "memory", CREATES, (_CREATE_PROBE,), 0.65),
    Scenario("create-file", "createPet, data file", "file", CREATES, (_CREATE_PROBE,), None),
)
SCALE: Final = "scale"
NAMES: Final = (*(scenario.name for scenario in SCENARIOS), SCALE)


@dataclass(frozen=True)
class Options:
    rounds: int
    duration: int
    warmup: int
    scenarios: tuple[str, ...]
    pets: int
    scale_rounds: int
    scale_duration: int
    tmp_dir: str | None


# --------------------------------------------------------------------------- servers


def ceiling_argv(pin: Pinning, port: int) -> list[str]:
    """The ceiling under the service's uvicorn settings (app.py: server_header=False)."""
    return [
        *pin.server,
        sys.executable,
        "-m",
        "uvicorn",
        "bench.ceiling:app",
        "--http",
        "httptools",
        "--loop",
        "uvloop",
        "--no-access-log",
        "--no-server-header",
        "--log-level",
        "warning",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


@contextlib.contextmanager
def servers(
    store: str, tmp: Path, pin: Pinning, start_timeout: float = 60.0
) -> Iterator[dict[str, Server]]:
    """The service (access log on and off) and the ceiling, ready, filled with FILL pets."""
    with contextlib.ExitStack() as stack:
        data = {name: tmp / f"{store}-{number}.jsonl" for number, name in enumerate(ROUND_ORDER)}

        def data_flag(name: str) -> Path | None:
            return data[name] if store == "file" else None

        running = {
            LOG_ON: stack.enter_context(
                serve(data_flag(LOG_ON), tmp / f"{store}-log-on.log", pin, log_level="info")
            ),
            LOG_OFF: stack.enter_context(
                serve(data_flag(LOG_OFF), tmp / f"{store}-log-off.log", pin)
            ),
        }
        environment = {n: v for n, v in os.environ.items() if not n.startswith("CEILING_")}
        environment["CEILING_API_KEY"] = API_KEY
        if store == "file":
            environment["CEILING_DATA"] = str(data[CEILING])
        port = free_port()
        running[CEILING] = stack.enter_context(
            spawn(ceiling_argv(pin, port), tmp / f"{store}-ceiling.log", port, environment)
        )
        for server in running.values():
            server.wait_ready(start_timeout)
        with ThreadPoolExecutor(len(running)) as pool:
            list(pool.map(fill, running.values()))
        yield {name: running[name] for name in ROUND_ORDER}


def fill(server: Server) -> None:
    """FILL creates, one at a time so that every server gets the same ids."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        for number in range(1, FILL + 1):
            status = STATUSES[(number - 1) % len(STATUSES)]
            status_part = f',"status":"{status}"' if status else ""
            body = f'{{"name":"pet-{number}","categoryId":{number % 100}{status_part}}}'
            connection.request("POST", "/v1/pets", body, _headers(API_KEY, body=True))
            response = connection.getresponse()
            answer = response.read()
            if response.status != 201 or f'"id":{number},'.encode() not in answer:
                raise BenchError(f"filling: create #{number} got {response.status} {answer!r}")
    finally:
        connection.close()


def _headers(key: str | None, body: bool = False) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    if body:
        headers["Content-Type"] = "application/json"
    return headers


Answer = tuple[int, list[tuple[str, str]], bytes]


def ask(server: Server, probe: Probe) -> Answer:
    """Status, headers but `date` (lower-case names, in order) and body of one request."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        headers = _headers(probe.key, body=probe.body is not None)
        connection.request(probe.method, probe.path, probe.body, headers)
        response = connection.getresponse()
        body = response.read()
        kept = [(name.lower(), value) for name, value in response.getheaders()]
        return response.status, [(n, v) for n, v in kept if n != "date"], body
    finally:
        connection.close()


def check_same_answers(scenarios: Sequence[Scenario], running: dict[str, Server]) -> list[str]:
    """Send every probe to every server: status and body must match the ceiling's (else
    BenchError); differing headers come back as warnings."""
    warnings = []
    for scenario in scenarios:
        for probe in scenario.probes:
            answers = {name: ask(server, probe) for name, server in running.items()}
            expected = answers[CEILING]
            for name, answer in answers.items():
                what = f"{scenario.name}: {probe.method} {probe.path}"
                if answer[0] != expected[0] or answer[2] != expected[2]:
                    raise BenchError(
                        f"{what}: the {name} and the ceiling answer differently:\n"
                        f"  {name}: {answer[0]} {answer[2]!r}\n"
                        f"  ceiling: {expected[0]} {expected[2]!r}"
                    )
                if sorted(answer[1]) != sorted(expected[1]):
                    warnings.append(
                        f"{what}: headers differ: {name} {answer[1]}, ceiling {expected[1]}"
                    )
    return warnings


# --------------------------------------------------------------------------- part 1


@dataclass
class Measured:
    """Every round of one scenario: the runs of each server, in round order."""

    scenario: Scenario
    runs: dict[str, list[WrkResult]]


def per_cpu_second(run: WrkResult) -> float:
    return run.created / run.server_cpu_seconds if run.server_cpu_seconds > 0 else 0.0


def measure(
    scenario: Scenario, running: dict[str, Server], options: Options, pin: Pinning
) -> Measured:
    """A warm-up run per server, then the rounds, the order reversed every other round."""
    print(f"  {scenario.title} ...", file=sys.stderr, flush=True)
    for name in ROUND_ORDER:
        run_wrk(running[name], CONNECTIONS, options.warmup, pin, scenario.requests)
    measured = Measured(scenario, {name: [] for name in ROUND_ORDER})
    for number in range(options.rounds):
        order = ROUND_ORDER if number % 2 == 0 else ROUND_ORDER[::-1]
        for name in order:
            run = run_wrk(running[name], CONNECTIONS, options.duration, pin, scenario.requests)
            measured.runs[name].append(run)
    return measured


def _ms(value: float) -> str:
    return f"{value:.2f}"


def pooled_ms(runs: Sequence[WrkResult], percentile: int) -> float:
    latencies = [value for run in runs for value in run.latencies_us]
    return statistics.quantiles(latencies, n=100)[percentile - 1] / 1000


def _rate(run: WrkResult, cpu: bool) -> float:
    return per_cpu_second(run) if cpu else run.per_second


def pair_ratios(ours: Sequence[WrkResult], theirs: Sequence[WrkResult], cpu: bool) -> list[float]:
    """ours/theirs per round (req/s, or req/CPU-s), the two runs of a round side by side."""
    pairs = zip(ours, theirs, strict=True)
    return [_rate(a, cpu) / _rate(b, cpu) for a, b in pairs if _rate(b, cpu) > 0] or [0.0]


def table_one(service: str, results: Sequence[Measured], options: Options) -> list[Target]:
    rows = []
    targets = []
    notes = []
    for measured in results:
        scenario = measured.scenario
        mine, ceiling = measured.runs[service], measured.runs[CEILING]
        ratios = pair_ratios(mine, ceiling, cpu=False)
        ratio = statistics.median(ratios)
        target = ""
        if scenario.target is not None:
            passed = ratio >= scenario.target
            target = f">= {scenario.target:.2f} {verdict(passed)}"
            targets.append(
                Target(
                    f"{scenario.title}, {service}: service/ceiling >= {scenario.target:.2f}",
                    f"{ratio:.3f}",
                    passed,
                )
            )
        rows.append(
            [
                scenario.title,
                f"{statistics.median(r.per_second for r in mine):,.0f}",
                f"{statistics.median(r.per_second for r in ceiling):,.0f}",
                f"{ratio:.3f}",
                f"{min(ratios):.2f}..{max(ratios):.2f}",
                _ms(pooled_ms(mine, 50)),
                _ms(pooled_ms(mine, 99)),
                _ms(pooled_ms(ceiling, 50)),
                _ms(pooled_ms(ceiling, 99)),
                f"{statistics.median(per_cpu_second(r) for r in mine):,.0f}",
                f"{statistics.median(per_cpu_second(r) for r in ceiling):,.0f}",
                f"{statistics.median(pair_ratios(mine, ceiling, cpu=True)):.3f}",
                f"{statistics.median(r.server_cpu for r in mine):.0%}/"
                f"{statistics.median(r.server_cpu for r in ceiling):.0%}",
                target,
            ]
        )
        for name, runs in ((service, mine), (CEILING, ceiling)):
            if errors := sum(run.errors for run in runs):
                notes.append(f"{scenario.title}: {errors} unexpected answers or errors ({name})")
    print_table(
        f"{service.capitalize()} vs. ceiling: wrk -t1 -c{CONNECTIONS}, {options.rounds} rounds "
        f"of {options.duration} s per server (latency in ms)",
        [
            "scenario",
            "svc req/s",
            "ceil req/s",
            "ratio",
            "pairs",
            "svc p50",
            "svc p99",
            "ceil p50",
            "ceil p99",
            "svc req/CPU-s",
            "ceil req/CPU-s",
            "CPU ratio",
            "busy svc/ceil",
            "target",
        ],
        rows,
    )
    for note in notes:
        print(f"note: {note}")
    return targets


def part_one(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    chosen = [s for s in SCENARIOS if s.name in options.scenarios]
    results: list[Measured] = []
    access_lines = 0
    for store in ("memory", "file"):
        scenarios = [s for s in chosen if s.store == store]
        if not scenarios:
            continue
        print(f"{store} store: starting 3 servers, {FILL} pets each", file=sys.stderr)
        with servers(store, tmp, pin) as running:
            for warning in check_same_answers(scenarios, running):
                print(f"warning: {warning}")
            results += [measure(s, running, options, pin) for s in scenarios]
            access_lines += _count_access_lines(running[LOG_ON].log)
    if not results:
        return []
    print(
        f"\n{len(chosen)} scenario(s); every answer checked equal to the ceiling's first "
        f"(status and body). The service with its access log on wrote {access_lines:,} "
        "access-log lines."
    )
    targets = []
    for service in (LOG_ON, LOG_OFF):
        targets += table_one(service, results, options)
    return targets


def _count_access_lines(log: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(1 for line in log.open("rb") if b'"GET /v1/' in line or b'"POST /v1/' in line)
    return 0


# --------------------------------------------------------------------------- part 2


def part_two(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    pets = options.pets
    print(f"scale: writing a {pets:,}-pet data file, starting 3 servers", file=sys.stderr)
    big, small = tmp / "big.jsonl", tmp / "small.jsonl"
    write_fixture(big, pets)
    write_fixture(small, SMALL_STORE)
    with serve(tmp / "empty.jsonl", tmp / "empty.log", pin) as server:
        server.wait_ready()
        empty_kib = server.status_kib("VmRSS")
    with serve(big, tmp / "big.log", pin) as many, serve(small, tmp / "small.log", pin) as few:
        ready_s = many.wait_ready()
        big_kib = many.status_kib("VmRSS")
        few.wait_ready()
        targets = [_memory_target(pets, empty_kib, big_kib, ready_s)]
        targets += _scale_latency(few, many, options, pin)
    return targets


def _memory_target(pets: int, empty_kib: int, big_kib: int, ready_s: float) -> Target:
    per_pet = (big_kib - empty_kib) * 1024 / pets
    print_table(
        f"Memory: the service's VmRSS once ready (ready in {ready_s:.1f} s with {pets:,} pets)",
        ["data file", "VmRSS MB", "bytes per pet", "target"],
        [
            ["empty", f"{empty_kib * 1024 / 1e6:.1f}", "", ""],
            [
                f"{pets:,} pets",
                f"{big_kib * 1024 / 1e6:.1f}",
                f"{per_pet:.0f}",
                f"< {BYTES_PER_PET_TARGET:.0f} {verdict(per_pet < BYTES_PER_PET_TARGET)}",
            ],
        ],
    )
    return Target(
        f"resident bytes per pet at {pets:,} pets < {BYTES_PER_PET_TARGET:.0f}",
        f"{per_pet:.0f}",
        per_pet < BYTES_PER_PET_TARGET,
    )


def _scale_latency(few: Server, many: Server, options: Options, pin: Pinning) -> list[Target]:
    variants = (
        ("limit=20", ""),
        ("limit=20 status=available", "&status=available"),
        ("limit=20, deep (after)", "&after={deep}"),
        ("limit=20 status=available, deep", "&status=available&after={deep}"),
    )
    rows = []
    targets = []
    sizes = ((few, SMALL_STORE), (many, options.pets))
    for title, query in variants:
        print(
            f"  listPets {title} at {SMALL_STORE:,} and {options.pets:,} pets ...", file=sys.stderr
        )
        requests = {
            count: _requests(200, "/v1/pets?limit=20" + query.format(deep=count - 100))
            for _, count in sizes
        }
        runs: dict[int, list[WrkResult]] = {count: [] for _, count in sizes}
        for server, count in sizes:
            run_wrk(server, SCALE_CONNECTIONS, options.warmup, pin, requests[count])
        for number in range(options.scale_rounds):
            for server, count in sizes if number % 2 == 0 else sizes[::-1]:
                run = run_wrk(
                    server, SCALE_CONNECTIONS, options.scale_duration, pin, requests[count]
                )
                runs[count].append(run)
        small, large = runs[SMALL_STORE], runs[options.pets]
        p50_ratio = statistics.median(
            b.p50_ms / a.p50_ms for a, b in zip(small, large, strict=True)
        )
        mean_ratio = statistics.median(
            b.mean_ms / a.mean_ms for a, b in zip(small, large, strict=True)
        )
        passed = p50_ratio <= SCALE_RATIO_TARGET
        rows.append(
            [
                title,
                _ms(pooled_ms(small, 50)),
                _ms(pooled_ms(small, 99)),
                _ms(pooled_ms(large, 50)),
                _ms(pooled_ms(large, 99)),
                f"{p50_ratio:.2f}x",
                f"{mean_ratio:.2f}x",
                f"<= {SCALE_RATIO_TARGET:g}x {verdict(passed)}",
            ]
        )
        targets.append(
            Target(
                f"listPets {title}: p50 at {options.pets:,} pets <= {SCALE_RATIO_TARGET:g}x "
                f"of {SMALL_STORE:,}",
                f"{p50_ratio:.2f}x",
                passed,
            )
        )
    k, m = f"{SMALL_STORE // 1000}k", f"{options.pets / 1e6:g}M"
    print_table(
        f"listPets latency, wrk -t1 -c{SCALE_CONNECTIONS}, {options.scale_rounds} rounds of "
        f"{options.scale_duration} s per server, access log off (ms; deep: after = pets - 100)",
        [
            "request",
            f"{k} p50",
            f"{k} p99",
            f"{m} p50",
            f"{m} p99",
            f"p50 {m}/{k}",
            f"mean {m}/{k}",
            "target (p50)",
        ],
        rows,
    )
    return targets


# --------------------------------------------------------------------------- main


def parse_options(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(
        prog="bench/run.py",
        description="Service vs. a bare ASGI ceiling (req/s, latency, CPU), then memory and "
        "listPets latency at 1,000,000 pets.",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per scenario")
    parser.add_argument("--duration", type=int, default=1, help="seconds per run (whole)")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of warm-up per server")
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help=f"run only these (repeatable or comma-separated): {', '.join(NAMES)}",
    )
    parser.add_argument("--pets", type=int, default=1_000_000, help="pets for the scale part")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 1 s: a smoke run")
    parser.add_argument("--tmp-dir", help="where the data files go (default: the system's)")
    flags = parser.parse_args(argv)
    chosen = [name.strip() for text in flags.scenario or [] for name in text.split(",")]
    if unknown := [name for name in chosen if name not in NAMES]:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(NAMES)}")
    rounds, duration = (2, 1) if flags.quick else (flags.rounds, flags.duration)
    if rounds < 1 or duration < 1 or flags.warmup < 1:
        parser.error("--rounds, --duration and --warmup are at least 1 (seconds: wrk's unit)")
    if flags.pets <= SMALL_STORE:
        parser.error(f"--pets must be above {SMALL_STORE}")
    return Options(
        rounds=rounds,
        duration=duration,
        warmup=flags.warmup,
        scenarios=tuple(chosen or NAMES),
        pets=flags.pets,
        scale_rounds=2 if flags.quick else 3,
        scale_duration=max(1, duration // 2),
        tmp_dir=flags.tmp_dir,
    )


def _machine(pin: Pinning) -> str:
    wrk = subprocess.run(  # noqa: S603 - a fixed argv of our own, no shell
        [wrk_path() or "wrk", "-v"], capture_output=True, text=True, check=False
    ).stdout.split(" [")[0]
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    loads = ", ".join(f"{load:.2f}" for load in os.getloadavg())
    return (
        f"petstore benchmark: {os.cpu_count()} cores ({model}), load average {loads} "
        f"(1, 5, 15 min)\nPython {platform.python_version()}, uvicorn "
        f"{metadata.version('uvicorn')}, msgspec {metadata.version('msgspec')}, {wrk}; "
        f"{pin.note}"
    )


def main(argv: Sequence[str]) -> int:
    options = parse_options(argv)
    if not prepare():
        return 2
    pin = pinning()
    started = time.perf_counter()
    print(_machine(pin))
    if (load := os.getloadavg()[0]) > BUSY_LOAD:
        print(
            f"warning: load average {load:.2f} at the start: other work shares the CPUs; "
            "compare ratios and req/CPU-s rather than req/s"
        )
    sys.stdout.flush()
    with tempfile.TemporaryDirectory(prefix="petstore-bench-", dir=options.tmp_dir) as name:
        tmp = Path(name)
        try:
            targets = part_one(tmp, options, pin)
            if SCALE in options.scenarios:
                targets += part_two(tmp, options, pin)
        except BenchError as error:
            print(f"\nbench: {error}", file=sys.stderr)
            return 2
    print_table(
        f"Targets (reported, not enforced; whole run {time.perf_counter() - started:.0f} s)",
        ["target", "measured", "verdict"],
        [[t.what, t.measured, verdict(t.passed)] for t in targets],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
