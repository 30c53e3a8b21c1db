"""Durability benchmark of the petstore: what the fsync before each 201 costs.

Run from the repository root:

    .venv/bin/python bench/durability.py [--duration 5] [--warmup 1] [--pets 1000000]

It needs wrk (Debian: `apt-get install wrk`) and, to give the server and the load generator a
core each, taskset (util-linux). Servers run as `python app.py --log-level warning`, data files
in a temp dir (fsync cost is the disk's: put it on the disk you care about with --tmp-dir);
every server is stopped and the temp dir removed at the end, also on error or SIGTERM. About a
minute with the defaults. It prints three tables and a verdict per target:

1. Durable creates/s: POST /v1/pets with wrk -t1 -cN (N = 1, 8, 32), a warm-up and then a
   timed run each, against the in-memory store and the data-file store (fresh file). Target:
   at 32 clients the file store reaches at least half the in-memory rate (group commit).
2. Start-up with 1,000,000 pets in the data file (written by this script, page cache warm):
   seconds from spawn to the first 200 from /readyz, and VmRSS once ready. Median of
   --startup-runs starts. Targets: ready within 3 s, under 250 MB resident.
3. Create latency with 1,000,000 pets stored vs. 10 (wrk -t1 -c1, file store). Target: mean
   and p50 with 1,000,000 pets within 1.5x of those with 10 (p99 is shown, not judged: one
   slow fsync moves it).

requests/s counts 201 answers. Latencies are timed per request by bench/create_pet.lua, not
taken from wrk's own statistics, which wrk "corrects" for coordinated omission with made-up
samples. "server CPU" is the CPU time the server used during a run, in cores: near 100% means
the server's one core is the limit, not the disk.

Exit status: 0 when every target passes, 1 when one fails, 2 when the benchmark can't run.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common import (
    BenchError,
    Pinning,
    Target,
    WrkResult,
    count_lines,
    fdatasync_ms,
    pinning,
    prepare,
    print_table,
    run_wrk,
    serve,
    verdict,
    write_fixture,
)

CLIENTS: Final = (1, 8, 32)
THROUGHPUT_RATIO_TARGET: Final = 0.5  # file/memory creates/s at 32 clients, at least
READY_TARGET_S: Final = 3.0
RSS_TARGET_MB: Final = 250.0
LATENCY_RATIO_TARGET: Final = 1.5  # latency with many pets / with 10, at most
SMALL_STORE: Final = 10
BUSY_LOAD: Final = 0.5  # a 1-minute load average above this before the start: noisy numbers


@dataclass(frozen=True)
class Options:
    duration: int
    warmup: int
    pets: int
    startup_runs: int
    tmp_dir: str | None


def ms(value: float) -> str:
    return f"{value:.2f}"


MEASURED: Final = ("mean", "p50", "p99", "errors", "server CPU")


def measure(run: WrkResult) -> list[str]:
    """requests/s and the MEASURED columns of a wrk run."""
    return [
        f"{run.per_second:,.0f}",
        ms(run.mean_ms),
        ms(run.p50_ms),
        ms(run.p99_ms),
        str(run.errors),
        f"{run.server_cpu:.0%}",
    ]


# --------------------------------------------------------------------------- 1. creates/s


def bench_throughput(tmp: Path, options: Options, pin: Pinning) -> Target:
    results: dict[tuple[str, int], WrkResult] = {}
    answered = 0  # 201s the file store gave, warm-ups included
    data = tmp / "throughput.jsonl"
    for store in ("memory", "file"):
        with serve(data if store == "file" else None, tmp / f"{store}.log", pin) as server:
            server.wait_ready()
            for clients in CLIENTS:
                warm = run_wrk(server, clients, options.warmup, pin)
                results[store, clients] = timed = run_wrk(server, clients, options.duration, pin)
                if store == "file":
                    answered += warm.created + timed.created

    rows = []
    for store in ("memory", "file"):
        for clients in CLIENTS:
            result = results[store, clients]
            ratio = result.per_second / results["memory", clients].per_second
            rows.append([store, str(clients), *measure(result), f"{ratio:.2f}"])
    print_table(
        f"1. Durable creates: wrk -t1 -cN, {options.duration} s after a {options.warmup} s "
        "warm-up (latency in ms)",
        ["store", "clients", "requests/s", *MEASURED, "file/memory"],
        rows,
    )
    stored = count_lines(data)
    print(f"data file afterwards: {stored:,} pets; wrk saw {answered:,} answers 201", end="")
    print(" (ok: every 201 is in the file)" if stored >= answered else " (PETS MISSING!)")

    ratio = results["file", 32].per_second / results["memory", 32].per_second
    return Target(
        f"file store at 32 clients >= {THROUGHPUT_RATIO_TARGET:g}x the in-memory creates/s",
        f"{ratio:.2f}x",
        ratio >= THROUGHPUT_RATIO_TARGET and stored >= answered,
    )


# --------------------------------------------------------------------------- 2. start-up


def bench_startup(tmp: Path, fixture: Path, options: Options, pin: Pinning) -> list[Target]:
    size_mb = fixture.stat().st_size / 1e6
    rows = []
    ready_s: list[float] = []
    rss_mb: list[float] = []
    for run in range(1, options.startup_runs + 1):
        with serve(fixture, tmp / "startup.log", pin) as server:
            ready_s.append(server.wait_ready())
            rss_mb.append(server.status_kib("VmRSS") * 1024 / 1e6)
            peak_mb = server.status_kib("VmHWM") * 1024 / 1e6
        rows.append([str(run), f"{ready_s[-1]:.2f}", f"{rss_mb[-1]:.0f}", f"{peak_mb:.0f}"])
    print_table(
        f"2. Start-up with {options.pets:,} pets in the data file ({size_mb:.0f} MB)",
        ["run", "spawn to ready s", "VmRSS MB once ready", "VmHWM (peak) MB"],
        rows,
    )
    ready = statistics.median(ready_s)
    rss = statistics.median(rss_mb)
    return [
        Target(
            f"ready within {READY_TARGET_S:g} s with {options.pets:,} pets (median)",
            f"{ready:.2f} s",
            ready <= READY_TARGET_S,
        ),
        Target(
            f"resident under {RSS_TARGET_MB:g} MB with {options.pets:,} pets (median)",
            f"{rss:.0f} MB",
            rss < RSS_TARGET_MB,
        ),
    ]


# --------------------------------------------------------------------------- 3. latency


def bench_latency(tmp: Path, fixture: Path, options: Options, pin: Pinning) -> Target:
    small = tmp / "small.jsonl"
    write_fixture(small, SMALL_STORE)
    results: list[WrkResult] = []
    for path in (small, fixture):
        with serve(path, tmp / "latency.log", pin) as server:
            server.wait_ready()
            run_wrk(server, 1, options.warmup, pin)
            results.append(run_wrk(server, 1, options.duration, pin))
    few, many = results
    ratios = [many.mean_ms / few.mean_ms, many.p50_ms / few.p50_ms, many.p99_ms / few.p99_ms]
    print_table(
        f"3. Create latency, file store, wrk -t1 -c1, {options.duration} s after a "
        f"{options.warmup} s warm-up (ms)",
        ["pets stored", "requests/s", *MEASURED],
        [
            [f"{SMALL_STORE:,}", *measure(few)],
            [f"{options.pets:,}", *measure(many)],
            [f"ratio {options.pets:,}/{SMALL_STORE}", "", *(f"{r:.2f}x" for r in ratios), "", ""],
        ],
    )
    return Target(
        f"create latency with {options.pets:,} pets within {LATENCY_RATIO_TARGET:g}x "
        f"of {SMALL_STORE} (mean, p50)",
        f"{ratios[0]:.2f}x, {ratios[1]:.2f}x",
        max(ratios[:2]) <= LATENCY_RATIO_TARGET and many.errors == few.errors == 0,
    )


# --------------------------------------------------------------------------- main


def parse_options(argv: Sequence[str]) -> Options:
    parser = argparse.ArgumentParser(
        prog="bench/durability.py",
        description="Measure durable creates/s, start-up with 1M pets and create latency.",
    )
    parser.add_argument("--duration", type=int, default=5, help="seconds per timed run")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of warm-up per run")
    parser.add_argument("--pets", type=int, default=1_000_000, help="pets in the large file")
    parser.add_argument("--startup-runs", type=int, default=3, help="starts to time")
    parser.add_argument("--tmp-dir", help="where the data files go (default: the system's)")
    flags = parser.parse_args(argv)
    if flags.duration < 1 or flags.warmup < 1:
        parser.error("--duration and --warmup are whole seconds, at least 1 (wrk's unit)")
    return Options(flags.duration, flags.warmup, flags.pets, flags.startup_runs, flags.tmp_dir)


def main(argv: Sequence[str]) -> int:
    options = parse_options(argv)
    if not prepare():
        return 2
    pin = pinning()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="petstore-bench-", dir=options.tmp_dir) as name:
        tmp = Path(name)
        print(f"petstore durability benchmark: Python {platform.python_version()}, {pin.note}")
        if (load := os.getloadavg()[0]) > BUSY_LOAD:
            print(f"warning: load average {load:.2f} before the start: other work shares the CPUs")
        probe = statistics.quantiles(fdatasync_ms(tmp), n=100)
        print(
            f"data files in {tmp}; an append + fdatasync there takes "
            f"p50 {probe[49]:.2f} ms, p99 {probe[98]:.2f} ms"
        )
        try:
            targets = [bench_throughput(tmp, options, pin)]
            fixture = tmp / "large.jsonl"
            began = time.perf_counter()
            write_fixture(fixture, options.pets)
            print(f"\n(wrote {options.pets:,} pets in {time.perf_counter() - began:.1f} s)")
            targets += bench_startup(tmp, fixture, options, pin)
            targets.append(bench_latency(tmp, fixture, options, pin))
        except BenchError as error:
            print(f"\nbench: {error}", file=sys.stderr)
            return 2
    print_table(
        f"Targets (whole run {time.perf_counter() - started:.0f} s)",
        ["target", "measured", "verdict"],
        [[t.what, t.measured, verdict(t.passed)] for t in targets],
    )
    return 0 if all(t.passed for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
