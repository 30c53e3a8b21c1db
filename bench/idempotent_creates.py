"""What Idempotency-Key costs: keyed creates against keyless ones, and a million keyed pets.

Run from the repository root:

    .venv/bin/python bench/idempotent_creates.py [--rounds 3] [--duration 2] [--pets 1000000]

It needs wrk (Debian: `apt-get install wrk`) and taskset; about two minutes with the defaults.

1. Creates with a key against creates without one, `wrk -t1 -c32` (bench/create_pet.lua, every
   key new: each request is a keyed create, not a replay), on one server per store (memory,
   data file), the two kinds alternating round by round; the ratio is taken pair by pair and
   its median reported. Rates are per second of the server's CPU time, as bench/run.py's: on a
   shared machine wall-clock rates moved 10 % between neighbouring rounds, which is the whole
   of the margin judged here (the wall-clock ratio is shown beside it). Target: keyed /
   keyless >= 0.90 on both stores.
2. A data file of 1,000,000 keyed pets (written by this script as the service writes them)
   against one of 1,000,000 plain pets and an empty one: seconds from spawn to the first 200
   from /readyz (median of --startup-runs), and VmRSS once ready. Resident bytes per keyed pet
   are (VmRSS keyed - VmRSS empty) / pets; what a key adds, (keyed - plain) / pets. Target:
   ready within 3 s.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common import (
    CREATES,
    Pinning,
    Target,
    WrkRequests,
    alternate,
    argument_parser,
    p50_p99,
    pair_ratios,
    parse_arguments,
    print_table,
    run_benchmark,
    serve,
    verdict,
)
from durability import write_fixture

CONNECTIONS: Final = 32
KEYED_CREATES: Final = WrkRequests(CREATES.script, CREATES.path, (*CREATES.args, "keyed"))
RATIO_TARGET: Final = 0.90
READY_TARGET_S: Final = 3.0
AT: Final = int(time.time())  # when the fixture's keys were made: now, so all are kept


@dataclass(frozen=True)
class Options:
    rounds: int
    duration: int
    warmup: int
    pets: int
    startup_runs: int


def bench_creates(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    rows, targets = [], []
    for store in ("memory", "file"):
        data = tmp / "creates.jsonl" if store == "file" else None
        with serve(data, tmp / f"creates-{store}.log", pin) as server:
            server.wait_ready()
            print(f"  creates, {store} store ...", file=sys.stderr, flush=True)
            runs = alternate(
                {"keyless": (server, CREATES), "keyed": (server, KEYED_CREATES)},
                connections=CONNECTIONS,
                rounds=options.rounds,
                seconds=options.duration,
                warmup=options.warmup,
                pin=pin,
            )
        ratios = pair_ratios(runs["keyed"], runs["keyless"], lambda run: run.per_cpu_second)
        wall = pair_ratios(runs["keyed"], runs["keyless"], lambda run: run.per_second)
        ratio = statistics.median(ratios)
        passed = ratio >= RATIO_TARGET
        rows.append(
            [
                store,
                f"{statistics.median(r.per_cpu_second for r in runs['keyless']):,.0f}",
                f"{statistics.median(r.per_cpu_second for r in runs['keyed']):,.0f}",
                f"{ratio:.3f}",
                f"{min(ratios):.2f}..{max(ratios):.2f}",
                f"{statistics.median(wall):.3f}",
                *p50_p99(runs["keyless"]),
                *p50_p99(runs["keyed"]),
                f">= {RATIO_TARGET:.2f} {verdict(passed)}",
            ]
        )
        targets.append(Target(f"keyed / keyless creates/s, {store}", f"{ratio:.3f}", passed))
    print_table(
        f"1. Creates with and without Idempotency-Key: wrk -t1 -c{CONNECTIONS}, {options.rounds} "
        f"rounds of {options.duration} s each (latency in ms)",
        [
            "store",
            "keyless req/CPU s",
            "keyed req/CPU s",
            "ratio",
            "pairs",
            "wall-clock ratio",
            "keyless p50",
            "keyless p99",
            "keyed p50",
            "keyed p99",
            "target",
        ],
        rows,
    )
    return targets


def write_keyed_fixture(path: Path, count: int) -> None:
    """`count` keyed pets, as the service writes a keyed create (write_fixture's pets, each
    with a key of 36 characters, the length of a UUID)."""
    plain = path.with_suffix(".plain")
    write_fixture(plain, count)
    with plain.open("rb") as source, path.open("wb") as target:
        for number, line in enumerate(source, 1):
            key = b"%036d" % number
            target.write(b'{"pet":%s,"idempotencyKey":"%s","keyedAt":%d}\n' % (line[:-1], key, AT))
        target.flush()
        os.fsync(target.fileno())
    plain.unlink()


def bench_keyed_file(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    files = {
        "empty": tmp / "empty.jsonl",
        "plain": tmp / "plain.jsonl",
        "keyed": tmp / "keyed.jsonl",
    }
    files["empty"].touch()
    write_fixture(files["plain"], options.pets)
    write_keyed_fixture(files["keyed"], options.pets)
    ready: dict[str, list[float]] = {name: [] for name in files}
    rss: dict[str, list[int]] = {name: [] for name in files}
    for _ in range(options.startup_runs):
        for name, path in files.items():
            with serve(path, tmp / f"start-{name}.log", pin) as server:
                ready[name].append(server.wait_ready())
                rss[name].append(server.status_kib("VmRSS"))
    kib = {name: statistics.median(values) for name, values in rss.items()}
    seconds = {name: statistics.median(values) for name, values in ready.items()}
    per_pet = (kib["keyed"] - kib["empty"]) * 1024 / options.pets
    per_key = (kib["keyed"] - kib["plain"]) * 1024 / options.pets
    passed = seconds["keyed"] <= READY_TARGET_S
    print_table(
        f"2. Start-up and memory with {options.pets:,} pets, keyed and plain (median of "
        f"{options.startup_runs} starts)",
        ["data file", "MB on disk", "spawn to ready s", "VmRSS MB", "bytes per pet"],
        [
            [
                name,
                f"{path.stat().st_size / 1e6:.0f}",
                f"{seconds[name]:.2f}",
                f"{kib[name] * 1024 / 1e6:.0f}",
                ""
                if name == "empty"
                else f"{(kib[name] - kib['empty']) * 1024 / options.pets:.0f}",
            ]
            for name, path in files.items()
        ],
    )
    print(f"what a key adds to a pet in memory: {per_key:.0f} bytes ({per_pet:.0f} a keyed pet)")
    return [
        Target(
            f"ready within {READY_TARGET_S:g} s with {options.pets:,} keyed pets",
            f"{seconds['keyed']:.2f} s",
            passed,
        )
    ]


def bench(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    return bench_creates(tmp, options, pin) + bench_keyed_file(tmp, options, pin)


def main(argv: Sequence[str]) -> int:
    parser = argument_parser(
        "bench/idempotent_creates.py",
        "Keyed against keyless creates; a million keyed pets.",
        duration=2,
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per kind")
    parser.add_argument("--pets", type=int, default=1_000_000, help="pets in the large files")
    parser.add_argument("--startup-runs", type=int, default=3, help="starts to time")
    flags = parse_arguments(parser, argv)
    if flags.rounds < 1 or flags.pets < 1 or flags.startup_runs < 1:
        parser.error("--rounds, --pets and --startup-runs are at least 1")
    options = Options(flags.rounds, flags.duration, flags.warmup, flags.pets, flags.startup_runs)
    return run_benchmark(lambda tmp, pin: bench(tmp, options, pin), flags.tmp_dir, enforced=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
