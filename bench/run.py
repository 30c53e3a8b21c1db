"""Throughput and latency of the petstore against a bare ASGI app and against its ceiling.

Run from the repository root (`make bench` runs it, then bench/durability.py and
bench/idempotent_creates.py):

    .venv/bin/python bench/run.py [--processes 3] [--rounds 1] [--duration 3] [--warmup 2]
        [--fill 10000] [--get-id 4242] [--scenario NAME ...] [--quick]

About twelve minutes with the defaults (12 min 9 s on 2026-11-24); --quick (one set of
processes, 2 rounds of 1 s after 1 s of warm-up) about two. It needs wrk (Debian: `apt-get
install wrk`) and, for a core each, taskset (util-linux).

Two baselines, both under the service's uvicorn settings (httptools, uvloop, one process, no
uvicorn access log, no Server header), started as `python -m uvicorn bench.NAME:app`:

- the bare app (bench/bare.py): the same bytes with the least work (pets kept as their JSON,
  the key compared as bytes). service / bare is what a user sees: how many of the requests
  the bare server answers per second of CPU the service answers.
- the ceiling (bench/ceiling.py): the service's three operations done as the service does them
  (SHA-256 key check, query validation, encoding each pet), no framework. service / ceiling is
  what the service's own code costs; ceiling / bare is what that necessary work costs.

The service runs as `python app.py`. Servers are pinned to core 0, wrk (and this script) to
core 1. Every server gets the same --fill pets first (POSTs, one at a time; status cycling
available, pending, sold, absent), then each scenario's probes are sent to every server and the
answers must match the ceiling's (status and body, else the run stops; headers but `date` and
`x-request-id`, else a warning; the bare app has no file store). Scenarios, each
`wrk -t1 -c32`:

    get            GET /v1/pets/4242 (--get-id; 0: ids 1..--fill in turn)
    list20         GET /v1/pets?limit=20
    list20-status  GET /v1/pets?limit=20&status=available
    list100        GET /v1/pets?limit=100
    unauthorized   GET /v1/pets?limit=20 with a wrong key (401)
    create-memory  POST /v1/pets, in-memory store
    create-file    POST /v1/pets, data file (fdatasync before each 201; the ceiling does the
                   same with group commit; no bare app)

The servers are started --processes times, one set after the other, each set fresh (new
processes, new data files, filled anew), and every scenario is measured on each: two processes
of one program differ by a few per cent (the twin, below), so a ratio taken from one pair of
processes carries their difference, and one from three sets of processes is the median of
three such draws. On each set, per scenario: a --warmup run per server, then --rounds rounds
(the pairs of every set are pooled). A round loads a second process of the default service
(its twin), the service with the test-control plane on (an admin key, the journal at its
default size, access log on), the service as it starts by default (access log on, log level
info, lines to a file), the ceiling, the bare app, and the service with its access log off,
--duration seconds each, in that order and reversed in the next round (and the next set), so
that the runs compared are near each other in time. How to read the tables (service vs. bare,
log on and off; service vs. ceiling, log on and off; ceiling vs. bare; plane on vs. off; the
twin vs. the service):

- ratio: requests answered per CPU-second of the server (/proc/PID/stat utime + stime around
  each run), one server's run over the other's in the same round, the median of the rounds of
  every set; "pairs" the lowest and highest. A CPU-second stays a CPU-second when other
  processes take turns on the server's core; wall-clock req/s does not, and with the machine
  shared the wall-clock ratio of the same runs moved by 0.2 either way (README, Performance).
  "wall ratio" is shown beside it, with "busy" (server CPU / wall time): near 100 % both agree.
- p50/p99: over every request of every round (bench/common.py says how latencies are timed).
- the twin: the same program with the same flags as the default service, in another process.
  Its ratio to the service is 1 but for what differs between two processes (where the kernel
  put their memory, their hash seeds) and the machine's noise: on 2026-11-24 two such
  processes measured 0.96-1.00 of each other for getPet over 8 rounds. A ratio elsewhere that
  is no farther from 1 than the twin's tells nothing.

Targets (ratio): service / ceiling >= 0.75 for get, list20, list20-status and unauthorized,
>= 0.65 for create-memory; plane on / off >= 0.95 on every scenario. They are reported, not
enforced: the exit status is 0 after the tables, 2 when the benchmark can't run (no wrk, a
server that does not start, answers that differ).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
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
    alternate,
    argument_parser,
    free_port,
    p50_p99,
    pair_ratios,
    parse_arguments,
    print_table,
    run_benchmark,
    serve,
    spawn,
    verdict,
    wrk_requests,
)

CONNECTIONS: Final = 32
# The defaults: the conditions of the independent harness (README, Performance).
FILL: Final = 10_000  # pets every server gets before timing
GET_ID: Final = 4242  # getPet asks for this one id (0: for the ids 1..FILL in turn)
PROCESSES: Final = 3  # sets of fresh server processes, one after the other
ROUNDS: Final = 1  # timed rounds per scenario on each set
DURATION: Final = 3  # seconds a timed run
WARMUP: Final = 2  # seconds of the warm-up run of each server, per scenario
WRONG_KEY: Final = "not-the-key-0123456789"
STATUSES: Final = ("available", "pending", "sold", None)  # the fill cycles through these

# The servers of a scenario, in the order of even rounds (odd rounds reverse it): the default
# service (access log on) is next to both the ceiling and the service with the plane on (which
# is next to the twin), the bare app next to the ceiling and the service with its log off.
TWIN: Final = "service, access log on, its twin"
PLANE_ON: Final = "service, test-control plane on"
LOG_ON: Final = "service, access log on"
CEILING: Final = "ceiling"
BARE: Final = "bare"
LOG_OFF: Final = "service, access log off"
ROUND_ORDER: Final[tuple[str, ...]] = (TWIN, PLANE_ON, LOG_ON, CEILING, BARE, LOG_OFF)
PLANE_FLAGS: Final = ("--admin-key", "bench-admin-key-0123456789")  # journal at its default size
PLANE_TARGET: Final = 0.95  # plane on / plane off, at least


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


_CREATE_PROBE: Final = Probe(
    "POST", "/v1/pets", body=b'{"name":"bench-0","categoryId":1,"status":"sold"}'
)


def get_scenario(fill: int, get_id: int) -> Scenario:
    """getPet of one fixed id, or (get_id 0) of the ids 1..fill in turn."""
    probes: tuple[Probe, ...] = (
        Probe("GET", "/v1/pets/1"),
        Probe("GET", "/v1/pets/4"),
        Probe("GET", f"/v1/pets/{fill}"),
    )
    if get_id:
        title = f"getPet (id {get_id})"
        requests = wrk_requests(200, f"/v1/pets/{get_id}")
        probes = (Probe("GET", f"/v1/pets/{get_id}"), *probes)
    else:
        title = f"getPet (ids 1..{fill})"
        requests = wrk_requests(200, "/v1/pets/{id}", ids=fill)
    return Scenario("get", title, "memory", requests, probes, 0.75)


SCENARIOS: Final = (
    get_scenario(FILL, GET_ID),
    Scenario(
        "list20",
        "listPets limit=20",
        "memory",
        wrk_requests(200, "/v1/pets?limit=20"),
        (Probe("GET", "/v1/pets?limit=20"),),
        0.75,
    ),
    Scenario(
        "list20-status",
        "listPets limit=20 status=available",
        "memory",
        wrk_requests(200, "/v1/pets?limit=20&status=available"),
        (Probe("GET", "/v1/pets?limit=20&status=available"),),
        0.75,
    ),
    Scenario(
        "list100",
        "listPets limit=100",
        "memory",
        wrk_requests(200, "/v1/pets?limit=100"),
        (Probe("GET", "/v1/pets?limit=100"), Probe("GET", "/v1/pets?limit=100&after=950")),
        None,
    ),
    Scenario(
        "unauthorized",
        "401 (wrong key)",
        "memory",
        wrk_requests(401, "/v1/pets?limit=20", key=WRONG_KEY),
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
NAMES: Final = tuple(scenario.name for scenario in SCENARIOS)


@dataclass(frozen=True)
class Options:
    processes: int
    rounds: int
    duration: int
    warmup: int
    scenarios: tuple[str, ...]
    fill: int
    get_id: int


# --------------------------------------------------------------------------- servers


def baseline_argv(module: str, pin: Pinning, port: int) -> list[str]:
    """A baseline (bench.ceiling, bench.bare) under the service's uvicorn settings (app.py:
    server_header=False)."""
    flags = (
        "--http httptools --loop uvloop --no-access-log --no-server-header --log-level warning"
        f" --host 127.0.0.1 --port {port}"
    )
    return [*pin.server, sys.executable, "-m", "uvicorn", f"{module}:app", *flags.split()]


@contextlib.contextmanager
def servers(  # noqa: PLR0913 - where, how, how many pets, how long to wait, and the twin
    store: str,
    tmp: Path,
    pin: Pinning,
    pets: int,
    start_timeout: float = 60.0,
    *,
    twin: bool = True,
) -> Iterator[dict[str, Server]]:
    """The service (access log on and off, plane on, and the twin of the first but when `twin`
    is false), the ceiling and (memory store) the bare app, ready, `pets` pets each."""
    with contextlib.ExitStack() as stack:
        data = {name: tmp / f"{store}-{number}.jsonl" for number, name in enumerate(ROUND_ORDER)}

        def data_flag(name: str) -> Path | None:
            return data[name] if store == "file" else None

        running = {
            PLANE_ON: stack.enter_context(
                serve(data_flag(PLANE_ON), tmp / f"{store}-plane.log", pin, "info", PLANE_FLAGS)
            ),
            LOG_ON: stack.enter_context(
                serve(data_flag(LOG_ON), tmp / f"{store}-log-on.log", pin, "info")
            ),
            LOG_OFF: stack.enter_context(
                serve(data_flag(LOG_OFF), tmp / f"{store}-log-off.log", pin)
            ),
        }
        if twin:
            running[TWIN] = stack.enter_context(
                serve(data_flag(TWIN), tmp / f"{store}-twin.log", pin, "info")
            )
        # The baselines import bench/asgi.py as `asgi`: the bench directory goes on their path.
        environment = {n: v for n, v in os.environ.items() if not n.startswith("CEILING_")}
        environment |= {"PYTHONPATH": str(BENCH), "CEILING_API_KEY": API_KEY}
        environment |= {"BARE_API_KEY": API_KEY}
        if store == "file":
            environment["CEILING_DATA"] = str(data[CEILING])

        def baseline(name: str, module: str) -> Server:
            port = free_port()
            argv = baseline_argv(module, pin, port)
            return stack.enter_context(spawn(argv, tmp / f"{store}-{name}.log", port, environment))

        running[CEILING] = baseline("ceiling", "bench.ceiling")
        if store == "memory":  # the bare app keeps no data file
            running[BARE] = baseline("bare", "bench.bare")
        for server in running.values():
            server.wait_ready(start_timeout)
        with ThreadPoolExecutor(len(running)) as pool:
            list(pool.map(lambda server: fill(server, pets), running.values()))
        yield {name: running[name] for name in ROUND_ORDER if name in running}


def fill(server: Server, pets: int) -> None:
    """`pets` creates, one at a time so that every server gets the same ids."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        for number in range(1, pets + 1):
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
# Headers that differ from one answer to the next, or that only the service sends (the ceiling
# makes no request ids: the cost of making them is part of what the comparison measures).
_VARYING: Final = frozenset({"date", "x-request-id"})


def ask(server: Server, probe: Probe) -> Answer:
    """Status, headers but `date` and `x-request-id` (lower-case names, in order) and body of
    one request."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        headers = _headers(probe.key, body=probe.body is not None)
        connection.request(probe.method, probe.path, probe.body, headers)
        response = connection.getresponse()
        body = response.read()
        kept = [(name.lower(), value) for name, value in response.getheaders()]
        return response.status, [(n, v) for n, v in kept if n not in _VARYING], body
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


# --------------------------------------------------------------------------- the rounds


@dataclass
class Measured:
    """Every round of one scenario: the runs of each server, in round order."""

    scenario: Scenario
    runs: dict[str, list[WrkResult]]


def measure(
    scenario: Scenario,
    running: dict[str, Server],
    options: Options,
    pin: Pinning,
    order: Sequence[str] = ROUND_ORDER,
) -> Measured:
    print(f"  {scenario.title} ...", file=sys.stderr, flush=True)
    loads = {name: (running[name], scenario.requests) for name in order if name in running}
    runs = alternate(
        loads,
        connections=CONNECTIONS,
        rounds=options.rounds,
        seconds=options.duration,
        warmup=options.warmup,
        pin=pin,
    )
    return Measured(scenario, runs)


def per_second(run: WrkResult) -> float:
    return run.per_second


SHORT: Final = {
    TWIN: "twin",
    PLANE_ON: "plane",
    LOG_ON: "svc",
    LOG_OFF: "svc",
    CEILING: "ceil",
    BARE: "bare",
}


def table(
    server: str,
    baseline: str,
    results: Sequence[Measured],
    judge: Callable[[Scenario], float | None] = lambda scenario: None,
) -> list[Target]:
    """`server` against `baseline`, a row a scenario: the ratio is of requests per CPU-second of
    the server, pair by pair; `judge` gives a scenario's target for it, or None."""
    rows = []
    targets = []
    notes = []
    mine_short, theirs_short = SHORT[server], SHORT[baseline]
    for measured in results:
        scenario = measured.scenario
        if baseline not in measured.runs:
            continue
        mine, theirs = measured.runs[server], measured.runs[baseline]
        ratios = pair_ratios(mine, theirs, lambda run: run.per_cpu_second)
        ratio = statistics.median(ratios)
        target = ""
        if (minimum := judge(scenario)) is not None:
            passed = ratio >= minimum
            target = f">= {minimum:.2f} {verdict(passed)}"
            targets.append(
                Target(
                    f"{scenario.title}: {server} / {baseline} >= {minimum:.2f}",
                    f"{ratio:.3f}",
                    passed,
                )
            )
        rows.append(
            [
                scenario.title,
                f"{ratio:.3f}",
                f"{min(ratios):.2f}..{max(ratios):.2f}",
                *p50_p99(mine),
                *p50_p99(theirs),
                f"{statistics.median(r.per_cpu_second for r in mine):,.0f}",
                f"{statistics.median(r.per_cpu_second for r in theirs):,.0f}",
                f"{statistics.median(pair_ratios(mine, theirs, per_second)):.3f}",
                f"{statistics.median(r.per_second for r in mine):,.0f}",
                f"{statistics.median(r.per_second for r in theirs):,.0f}",
                f"{statistics.median(r.server_cpu for r in mine):.0%}/"
                f"{statistics.median(r.server_cpu for r in theirs):.0%}",
                target,
            ]
        )
        for name, runs in ((server, mine), (baseline, theirs)):
            if errors := sum(run.errors for run in runs):
                notes.append(f"{scenario.title}: {errors} unexpected answers or errors ({name})")
    print_table(
        f"{server.capitalize()} vs. {baseline} (ratio: req/CPU-s, median of pairs; latency in ms)",
        [
            "scenario",
            "ratio",
            "pairs",
            f"{mine_short} p50",
            f"{mine_short} p99",
            f"{theirs_short} p50",
            f"{theirs_short} p99",
            f"{mine_short} req/CPU-s",
            f"{theirs_short} req/CPU-s",
            "wall ratio",
            f"{mine_short} req/s",
            f"{theirs_short} req/s",
            f"busy {mine_short}/{theirs_short}",
            "target",
        ],
        rows,
    )
    for note in notes:
        print(f"note: {note}")
    return targets


def bench(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    every = [get_scenario(options.fill, options.get_id), *SCENARIOS[1:]]
    chosen = [s for s in every if s.name in options.scenarios]
    # The rounds of every set of processes, one pool of pairs a scenario.
    results = {scenario.name: Measured(scenario, {}) for scenario in chosen}
    access_lines = 0
    for store in ("memory", "file"):
        scenarios = [s for s in chosen if s.store == store]
        if not scenarios:
            continue
        for number in range(1, options.processes + 1):
            print(
                f"{store} store, processes {number} of {options.processes}: starting the "
                f"servers, {options.fill} pets each",
                file=sys.stderr,
            )
            here = tmp / f"{store}-{number}"  # fresh data files for fresh processes
            here.mkdir()
            # Each set starts where the one before ended, as rounds alternate.
            order = ROUND_ORDER if number % 2 else ROUND_ORDER[::-1]
            with servers(store, here, pin, options.fill) as running:
                for warning in check_same_answers(scenarios, running):
                    print(f"warning: {warning}")
                for scenario in scenarios:
                    pooled = results[scenario.name].runs
                    for name, runs in measure(scenario, running, options, pin, order).runs.items():
                        pooled.setdefault(name, []).extend(runs)
                access_lines += _count_access_lines(running[LOG_ON].log)
    get = f"id {options.get_id}" if options.get_id else f"ids 1..{options.fill} in turn"
    print(
        f"\n{len(chosen)} scenario(s); every answer checked equal to the ceiling's first "
        f"(status and body). The service with its access log on wrote {access_lines:,} "
        f"access-log lines.\nEvery server: {options.fill:,} pets created by POST first, getPet "
        f"of {get}; per scenario a {options.warmup} s warm-up run per server, then "
        f"{options.rounds} round(s) of {options.duration} s per server (wrk -t1 -c{CONNECTIONS}), "
        f"servers in alternating order, on each of {options.processes} set(s) of servers started "
        "anew, one after the other. ratio: requests per CPU-second of the server, a run of "
        "each in the same round taken as a pair, the median of the pairs; 'pairs' the lowest "
        "and highest. p50/p99 over every request of every round; 'wall ratio' the same pairs "
        "by wall-clock req/s; 'busy' server CPU / wall time."
    )
    every_set = list(results.values())
    for service in (LOG_ON, LOG_OFF):
        table(service, BARE, every_set)
    targets = []
    for service in (LOG_ON, LOG_OFF):
        targets += table(service, CEILING, every_set, lambda scenario: scenario.target)
    table(CEILING, BARE, every_set)
    targets += table(PLANE_ON, LOG_ON, every_set, lambda scenario: PLANE_TARGET)
    table(TWIN, LOG_ON, every_set)
    return targets


def _count_access_lines(log: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(1 for line in log.open("rb") if b'"GET /v1/' in line or b'"POST /v1/' in line)
    return 0


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str]) -> int:
    parser = argument_parser(
        "bench/run.py",
        "The service vs. a bare ASGI app and vs. the ceiling: req/CPU-s, latency.",
        duration=DURATION,
        warmup=WARMUP,
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=PROCESSES,
        help="sets of servers started anew, one after the other, each measured in turn",
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help="timed rounds per scenario and set"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help=f"run only these (repeatable or comma-separated): {', '.join(NAMES)}",
    )
    parser.add_argument("--fill", type=int, default=FILL, help="pets created before timing")
    parser.add_argument(
        "--get-id",
        type=int,
        default=GET_ID,
        help="getPet asks for this id only (0: 1..fill in turn)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="2 rounds of 1 s after 1 s warm-up: a smoke run"
    )
    flags = parse_arguments(parser, argv)
    chosen = [name.strip() for text in flags.scenario or [] for name in text.split(",")]
    if unknown := [name for name in chosen if name not in NAMES]:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(NAMES)}")
    if flags.rounds < 1 or flags.processes < 1:
        parser.error("--rounds and --processes are at least 1")
    processes, rounds, duration, warmup = (
        (1, 2, 1, 1)
        if flags.quick
        else (flags.processes, flags.rounds, flags.duration, flags.warmup)
    )
    if not 1 <= flags.get_id <= flags.fill and flags.get_id != 0:
        parser.error("--get-id is 0 (every id in turn) or one of the ids 1..--fill")
    chosen_options = Options(
        processes, rounds, duration, warmup, tuple(chosen or NAMES), flags.fill, flags.get_id
    )
    return run_benchmark(
        lambda tmp, pin: bench(tmp, chosen_options, pin),
        flags.tmp_dir,
        enforced=False,
        busy_hint="; compare ratios and req/CPU-s rather than req/s",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
