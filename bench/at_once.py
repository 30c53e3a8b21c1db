"""What a feature costs with the servers loaded at once, side by side in the same seconds.

Run from the repository root (`make bench` runs it twice after bench/run.py):

    .venv/bin/python bench/at_once.py [--against plane|before-issue-11] [--processes 3]
        [--rounds 4] [--duration 3] [--warmup 2] [--scenario NAME ...]

About six minutes with the defaults. It needs wrk, git and, for a core each, taskset.

Two comparisons (--against), each with the default service and its twin:
- `plane` (the default): the service with the test-control plane on (issue 9: plane on / off
  at least 0.95).
- `before-issue-11`: the service without what issue 11 added (its budget: metrics, request
  ids and the new access log together cost at most 3 %, so the service / that one at least
  0.97). There is no flag for that service: request ids are on every response. It is this
  tree's top-level modules copied and changed by bench/before_issue_11.patch (no request id
  taken, made, sent or logged; the access log as it was, its lines formatted in one go every
  half second without escaping or redaction), run with `--metrics off`. A patch that no longer
  applies stops the run with git's message: update it with the code it changes.

bench/run.py loads one server at a time and pairs runs a few seconds apart: on this shared
machine the speed moves between two such runs by more than the plane's 5 % budget (its twin,
two processes of one program, measured 0.955-1.173 in the noisy hour of 2026-11-28). Here the
three servers compared (the default service, its twin and the third, all three with the
access log on) share the server core and are loaded over the same seconds, each by a wrk of
its own on the client core (wrk -t1 -c32). What slows the machine then slows the three
alike, and each one's requests per CPU-second is taken over the same time. Its twin measured
0.997 (quartiles 0.975-1.019) in an hour when bench/run.py's pairs spread 0.67-1.25.

What it does not measure: how fast a server is alone. Each gets about a third of the core,
and where the core passes from one to another, the caches hold the others' data: a server
that keeps more memory (the journal's thousand entries) may lose more to that here than it
would alone. The plane's cost it gives is the same few microseconds a request as
bench/run.py's (the run of 2026-11-25: 0.924-0.951), told apart from the noise.

Every set of processes (--processes) is started anew with 10,000 pets created by POST (the
data-file scenario on a set of its own, each server with its data file); per scenario, a
--warmup run of the three at once, then --rounds runs of --duration seconds. ratio: the
server with the feature over the one without (plane on over the service; the service over the
one before issue 11; the twin over the service), requests per CPU-second (/proc/PID/stat) in
the same run, the median of every run of every set; quartiles and the lowest and highest
beside it. The target is reported, not enforced: the exit status is 0 after the table, 2 when
the benchmark can't run.
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from common import (
    ROOT,
    BenchError,
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
BEFORE_ISSUE_11: Final = "before issue 11"
ISSUE_11_TARGET: Final = 0.97  # the service / the service before issue 11, at least
PATCH: Final = ROOT / "bench" / "before_issue_11.patch"


@dataclass(frozen=True)
class Third:
    """The server the default service and its twin are loaded beside, and what is reported."""

    name: str
    flags: tuple[str, ...]
    target: float
    # The ratio is this server's over the service's (its feature on), else the service's over
    # this server's (the feature on in the service).
    has_feature: bool
    ratio: str  # what the ratio is, for the table's title
    root: Path = ROOT


PLANE: Final = Third(PLANE_ON, PLANE_FLAGS, PLANE_TARGET, True, "plane on / off")


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


def before_issue_11(tmp: Path) -> Third:
    """This tree's top-level modules, copied into `tmp` and changed by PATCH: the service
    without what issue 11 added, as a Third (run with `--metrics off`)."""
    tree = tmp / "before-issue-11"
    tree.mkdir()
    for module in ROOT.glob("*.py"):
        shutil.copy2(module, tree)
    git = shutil.which("git")
    if git is None:
        raise BenchError("git not found: it applies bench/before_issue_11.patch")
    applied = subprocess.run(  # noqa: S603 - a fixed argv of our own, no shell
        [git, "apply", str(PATCH)], cwd=tree, capture_output=True, text=True, check=False
    )
    if applied.returncode != 0:
        raise BenchError(f"{PATCH.name} no longer applies to this tree:\n{applied.stderr}")
    return Third(
        BEFORE_ISSUE_11,
        ("--metrics", "off"),
        ISSUE_11_TARGET,
        False,
        "service / service before issue 11",
        tree,
    )


@contextlib.contextmanager
def three_servers(
    store: str, here: Path, pin: Pinning, pets: int, third: Third
) -> Iterator[dict[str, Server]]:
    """The default service, its twin and `third`, ready, `pets` each."""
    with contextlib.ExitStack() as stack:
        running = {}
        for name, extra, root in (
            (SERVICE, (), ROOT),
            (TWIN, (), ROOT),
            (third.name, third.flags, third.root),
        ):
            data = here / f"{name.replace(' ', '-')}.jsonl" if store == "file" else None
            log = here / f"{name.replace(' ', '-')}.log"
            running[name] = stack.enter_context(serve(data, log, pin, "info", extra, root=root))
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


def bench(
    tmp: Path, chosen: Sequence[Scenario], options: Options, pin: Pinning, against: str
) -> list[Target]:
    third = PLANE if against == "plane" else before_issue_11(tmp)
    measured = {scenario.name: Runs(scenario) for scenario in chosen}
    for store in ("memory", "file"):
        scenarios = [s for s in chosen if s.store == store]
        if not scenarios:
            continue
        for number in range(1, options.processes + 1):
            print(f"{store} store, processes {number} of {options.processes}", file=sys.stderr)
            here = tmp / f"{store}-{number}"
            here.mkdir()
            with three_servers(store, here, pin, FILL, third) as running:
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
        service, other = runs.by_server[SERVICE], runs.by_server[third.name]
        ratios = pair_ratios(
            *((other, service) if third.has_feature else (service, other)),
            lambda run: run.per_cpu_second,
        )
        twin = pair_ratios(runs.by_server[TWIN], service, lambda run: run.per_cpu_second)
        ratio = statistics.median(ratios)
        passed = ratio >= third.target
        q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratio,) * 3
        t1, _, t3 = statistics.quantiles(twin, n=4) if len(twin) > 1 else (twin[0],) * 3
        title = runs.scenario.title
        targets.append(Target(f"{title}: {third.ratio} >= {third.target}", f"{ratio:.3f}", passed))
        rows.append(
            [
                title,
                f"{ratio:.3f}",
                f"{q1:.3f}..{q3:.3f}",
                f"{min(ratios):.2f}..{max(ratios):.2f}",
                f"{statistics.median(twin):.3f}",
                f"{t1:.3f}..{t3:.3f}",
                *p50_p99(other),
                *p50_p99(service),
                f"{statistics.median(run.per_cpu_second for run in service):,.0f}",
                f">= {third.target:.2f} {verdict(passed)}",
            ]
        )
    print_table(
        f"{third.ratio}, at once (ratio: req/CPU-s, median of runs; latency in ms)",
        [
            "scenario",
            "ratio",
            "q1..q3",
            "runs",
            "twin",
            "twin q1..q3",
            f"{third.name} p50",
            f"{third.name} p99",
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
        "A feature's cost, the servers loaded at once: req/CPU-s, latency.",
        duration=DURATION,
        warmup=WARMUP,
    )
    parser.add_argument(
        "--against",
        choices=("plane", "before-issue-11"),
        default="plane",
        help="the third server: the plane on (issue 9), or the service before issue 11",
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
        lambda tmp, pin: bench(tmp, scenarios, options, pin, flags.against),
        flags.tmp_dir,
        enforced=False,
        busy_hint="; the ratios are taken in the same seconds",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
