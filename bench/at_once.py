"""The test-control plane's cost with the servers loaded at once, side by side in the same seconds.

Run from the repository root (`make bench` runs it after bench/run.py):

    .venv/bin/python bench/at_once.py [--processes 3] [--rounds 4] [--duration 3] [--warmup 2]
        [--scenario NAME ...]

About six minutes with the defaults. It needs wrk and, for a core each, taskset.

bench/run.py loads one server at a time and pairs runs a few seconds apart: on this shared
machine the speed moves between two such runs by more than the plane's 5 % budget (its twin,
two processes of one program, measured 0.955-1.173 in the noisy hour of 2026-11-28). Here the
three servers compared (the default service, its twin, and the service with the test-control
plane on: an admin key, the journal at its default size; all three with the access log on)
share the server core and are loaded over the same seconds, each by a wrk of its own on the
client core (wrk -t1 -c32). What slows the machine then slows the three alike, and each
one's requests per CPU-second is taken over the same time. Its twin measured 0.997
(quartiles 0.975-1.019) in an hour when bench/run.py's pairs spread 0.67-1.25.

What it does not measure: how fast a server is alone. Each gets about a third of the core,
and where the core passes from one to another, the caches hold the others' data: a server
that keeps more memory (the journal's thousand entries) may lose more to that here than it
would alone. The plane's cost it gives is the same few microseconds a request as
bench/run.py's (the run of 2026-11-25: 0.924-0.951), told apart from the noise.

Every set of processes (--processes) is started anew with 10,000 pets created by POST (the
data-file scenario on a set of its own, each server with its data file); per scenario, a
--warmup run of the three at once, then --rounds runs of --duration seconds. ratio: plane on
(or the twin) over the default service, requests per CPU-second (/proc/PID/stat) in the same
run, the median of every run of every set; quartiles and the lowest and highest beside it.
The target (plane on / off >= 0.95, issue 9) is reported, not enforced: the exit status is 0
after the table, 2 when the benchmark can't run.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from common import (
    Pinning,
    Server,
    Target,
    WrkResult,
    argument_parser,
    p50_p99,
    pair_ratios,
    parse_arguments,
    print_table,
    run_benchmark,
    run_wrk,
    serve,
    verdict,
)
from run import (
    CONNECTIONS,
    FILL,
    GET_ID,
    NAMES,
    PLANE_FLAGS,
    PLANE_TARGET,
    SCENARIOS,
    Scenario,
    fill,
)

PROCESSES: Final = 3
ROUNDS: Final = 4
DURATION: Final = 3
WARMUP: Final = 2
SERVICE: Final = "service"
TWIN: Final = "twin"
PLANE_ON: Final = "plane on"


@dataclass(frozen=True)
class Options:
    processes: int
    rounds: int
    duration: int
    warmup: int


@dataclass
class Runs:
    """Every timed run of one scenario, by server, in the order they ran (runs at once share
    their index)."""

    scenario: Scenario
    by_server: dict[str, list[WrkResult]] = field(default_factory=dict)


@contextlib.contextmanager
def three_servers(store: str, here: Path, pin: Pinning, pets: int) -> Iterator[dict[str, Server]]:
    """The default service, its twin and the service with the plane on, ready, `pets` each."""
    with contextlib.ExitStack() as stack:
        running = {}
        for name, extra in ((SERVICE, ()), (TWIN, ()), (PLANE_ON, PLANE_FLAGS)):
            data = here / f"{name.replace(' ', '-')}.jsonl" if store == "file" else None
            log = here / f"{name.replace(' ', '-')}.log"
            running[name] = stack.enter_context(serve(data, log, pin, "info", extra))
        for server in running.values():
            server.wait_ready()
        with ThreadPoolExecutor(len(running)) as pool:
            list(pool.map(lambda server: fill(server, pets), running.values()))
        yield running


def at_once(
    running: dict[str, Server], scenario: Scenario, seconds: int, pin: Pinning
) -> dict[str, WrkResult]:
    """A wrk run against each server, all in the same seconds."""
    with ThreadPoolExecutor(len(running)) as pool:
        started = {
            name: pool.submit(run_wrk, server, CONNECTIONS, seconds, pin, scenario.requests)
            for name, server in running.items()
        }
        return {name: future.result() for name, future in started.items()}


def bench(tmp: Path, chosen: Sequence[Scenario], options: Options, pin: Pinning) -> list[Target]:
    measured = {scenario.name: Runs(scenario) for scenario in chosen}
    for store in ("memory", "file"):
        scenarios = [s for s in chosen if s.store == store]
        if not scenarios:
            continue
        for number in range(1, options.processes + 1):
            print(f"{store} store, processes {number} of {options.processes}", file=sys.stderr)
            here = tmp / f"{store}-{number}"
            here.mkdir()
            with three_servers(store, here, pin, FILL) as running:
                for scenario in scenarios:
                    print(f"  {scenario.title} ...", file=sys.stderr, flush=True)
                    at_once(running, scenario, options.warmup, pin)
                    for _ in range(options.rounds):
                        for name, run in at_once(running, scenario, options.duration, pin).items():
                            measured[scenario.name].by_server.setdefault(name, []).append(run)
    print(
        f"\nEvery server: {FILL:,} pets created by POST first, getPet of id {GET_ID}; per "
        f"scenario a {options.warmup} s warm-up, then {options.rounds} run(s) of "
        f"{options.duration} s of the three servers at once (one core, a wrk -t1 "
        f"-c{CONNECTIONS} each), on each of {options.processes} set(s) of servers started anew. "
        "ratio: requests per CPU-second against the default service's in the same run, the "
        "median of the runs; q1..q3 their quartiles, 'runs' the lowest and highest. p50/p99 "
        "over every request of every run (each server had a third of the core)."
    )
    rows, targets = [], []
    for runs in measured.values():
        service = runs.by_server[SERVICE]
        plane = pair_ratios(runs.by_server[PLANE_ON], service, lambda run: run.per_cpu_second)
        twin = pair_ratios(runs.by_server[TWIN], service, lambda run: run.per_cpu_second)
        ratio = statistics.median(plane)
        passed = ratio >= PLANE_TARGET
        q1, _, q3 = statistics.quantiles(plane, n=4) if len(plane) > 1 else (ratio,) * 3
        t1, _, t3 = statistics.quantiles(twin, n=4) if len(twin) > 1 else (twin[0],) * 3
        title = runs.scenario.title
        targets.append(Target(f"{title}: plane on / off >= {PLANE_TARGET}", f"{ratio:.3f}", passed))
        rows.append(
            [
                title,
                f"{ratio:.3f}",
                f"{q1:.3f}..{q3:.3f}",
                f"{min(plane):.2f}..{max(plane):.2f}",
                f"{statistics.median(twin):.3f}",
                f"{t1:.3f}..{t3:.3f}",
                *p50_p99(runs.by_server[PLANE_ON]),
                *p50_p99(service),
                f"{statistics.median(run.per_cpu_second for run in service):,.0f}",
                f">= {PLANE_TARGET:.2f} {verdict(passed)}",
            ]
        )
    print_table(
        "Plane on vs. off, at once (ratio: req/CPU-s, median of runs; latency in ms)",
        [
            "scenario",
            "ratio",
            "q1..q3",
            "runs",
            "twin",
            "twin q1..q3",
            "plane p50",
            "plane p99",
            "svc p50",
            "svc p99",
            "svc req/CPU-s",
            "target",
        ],
        rows,
    )
    return targets


def main(argv: Sequence[str]) -> int:
    parser = argument_parser(
        "bench/at_once.py",
        "Plane on vs. off, the servers loaded at once: req/CPU-s, latency.",
        duration=DURATION,
        warmup=WARMUP,
    )
    parser.add_argument("--processes", type=int, default=PROCESSES, help="sets of servers")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="timed runs a scenario a set")
    parser.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help=f"run only these (repeatable or comma-separated): {', '.join(NAMES)}",
    )
    flags = parse_arguments(parser, argv)
    chosen = [name.strip() for text in flags.scenario or [] for name in text.split(",")]
    if unknown := [name for name in chosen if name not in NAMES]:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(NAMES)}")
    if flags.rounds < 1 or flags.processes < 1:
        parser.error("--rounds and --processes are at least 1")
    scenarios = [s for s in SCENARIOS if not chosen or s.name in chosen]
    options = Options(flags.processes, flags.rounds, flags.duration, flags.warmup)
    return run_benchmark(
        lambda tmp, pin: bench(tmp, scenarios, options, pin),
        flags.tmp_dir,
        enforced=False,
        busy_hint="; the ratios are taken in the same seconds",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
