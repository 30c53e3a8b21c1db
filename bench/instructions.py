"""Instructions per request, service vs. ceiling: counted under callgrind, not timed.

Run from the repository root:

    .venv/bin/python bench/instructions.py [--scenario get,list20,...] [--duration 5]

bench/run.py times the service against the ceiling; on a shared machine its req/s move by
10-20 % from minute to minute and only its pairing cancels that. The number of instructions a
request costs does not move: this runs the same three servers as bench/run.py (the service
with its access log on and off, the ceiling) under valgrind's callgrind, about fifty times
slower, fills each with the same 1,000 pets, and per scenario sends the same requests with
wrk (8 connections, so that the server is always the bottleneck): a warm-up, then the
counters zeroed, --duration seconds of load, and a dump. Instructions per request are the
instructions the server process executed over the answers it gave with the expected status.

Good for telling whether a change made the service cheaper, by how much, and where (open
the dumps it leaves with callgrind_annotate, or kcachegrind). Instructions are not time:
cache misses are not in them, and the service's larger code misses more, so bench/run.py's
timed ratios come out a little lower than these.

Needs valgrind (Debian: `apt-get install valgrind`; callgrind_control comes with it) and wrk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from common import (
    BenchError,
    Pinning,
    Server,
    callgrind_control,
    newest_total,
    prepare,
    print_table,
    run_wrk,
)
from run import (
    CEILING,
    FILL,
    LOG_OFF,
    LOG_ON,
    SCENARIOS,
    Scenario,
    check_same_answers,
    servers,
)

CONNECTIONS: Final = 8
WARMUP_SECONDS: Final = 2
START_TIMEOUT: Final = 300.0  # seconds: Python starts slowly under callgrind
MEMORY_SCENARIOS: Final = tuple(s.name for s in SCENARIOS if s.store == "memory")


def _valgrind(valgrind: str, dumps: Path) -> Pinning:
    """A "pinning" whose server prefix runs the server under callgrind (valgrind runs the
    program in its own process, so the pid is the server's) and whose client runs wrk as is."""
    dump = f"--callgrind-out-file={dumps}/callgrind.%p"
    return Pinning((valgrind, "--tool=callgrind", dump), (), "servers under callgrind")


def count(scenario: Scenario, server: Server, duration: int, pin: Pinning, dumps: Path) -> int:
    """Instructions per answer of one server in one scenario."""
    run_wrk(server, CONNECTIONS, WARMUP_SECONDS, pin, scenario.requests)
    callgrind_control("--zero", str(server.process.pid))
    run = run_wrk(server, CONNECTIONS, duration, pin, scenario.requests)
    callgrind_control("--dump", str(server.process.pid))
    if run.created < 100:
        raise BenchError(f"{scenario.name}: only {run.created} answers in {duration} s")
    return newest_total(dumps, server.process.pid) // run.created


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="bench/instructions.py",
        description="Instructions per request, service vs. ceiling, under callgrind.",
    )
    parser.add_argument(
        "--scenario",
        default=",".join(MEMORY_SCENARIOS),
        help=f"comma-separated, of: {', '.join(MEMORY_SCENARIOS)} (default: all)",
    )
    parser.add_argument("--duration", type=int, default=5, help="seconds of counted load")
    parser.add_argument("--keep", help="a directory to keep the callgrind dumps in")
    flags = parser.parse_args(argv)
    chosen = [name.strip() for name in flags.scenario.split(",")]
    if unknown := [name for name in chosen if name not in MEMORY_SCENARIOS]:
        parser.error(f"unknown scenario {', '.join(unknown)}; known: {', '.join(MEMORY_SCENARIOS)}")
    valgrind = shutil.which("valgrind")
    if valgrind is None or shutil.which("callgrind_control") is None:
        print("bench: valgrind is not installed: `apt-get install valgrind`", file=sys.stderr)
        return 2
    if not prepare():
        return 2
    # Every server with one hash seed (unless the caller chose one): a seed of its own moved a
    # request's count by up to 5k from one run to the next (bench/HISTORY.md, 2026-11-24).
    os.environ.setdefault("PYTHONHASHSEED", "0")
    scenarios = [s for s in SCENARIOS if s.name in chosen]  # creates last: they grow the stores
    rows = []
    with tempfile.TemporaryDirectory(prefix="petstore-instructions-") as name:
        tmp = Path(name)
        dumps = Path(flags.keep) if flags.keep else tmp
        dumps.mkdir(parents=True, exist_ok=True)
        pin = _valgrind(valgrind, dumps.resolve())
        try:
            with servers("memory", tmp, pin, FILL, START_TIMEOUT, twin=False) as running:
                names = list(running)
                check_same_answers(scenarios, running)
                for scenario in scenarios:
                    print(f"  {scenario.title} ...", file=sys.stderr, flush=True)
                    per = {
                        name: count(scenario, server, flags.duration, pin, dumps)
                        for name, server in running.items()
                    }
                    rows.append(
                        [
                            scenario.title,
                            *(f"{per[name]:,}" for name in names),
                            f"{per[CEILING] / per[LOG_ON]:.3f}",
                            f"{per[CEILING] / per[LOG_OFF]:.3f}",
                        ]
                    )
        except BenchError as error:
            print(f"\nbench: {error}", file=sys.stderr)
            return 2
    print_table(
        f"Instructions per request (callgrind, wrk -c{CONNECTIONS}, {flags.duration} s counted); "
        "ratio = ceiling / service, as bench/run.py's service / ceiling in req/s",
        ["scenario", *names, "ratio log on", "ratio log off"],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
