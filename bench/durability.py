"""Durability and scale benchmark of the petstore: the fsync before each 201, and 1,000,000 pets.

Run from the repository root (`make bench` runs it after bench/run.py):

    .venv/bin/python bench/durability.py [--duration 5] [--warmup 1] [--pets 1000000]
        [--startup-runs 3] [--tmp-dir DIR]

Servers run as `python app.py --log-level warning`, their data files in a temp dir (fsync cost
is the disk's: put it on the disk you care about with --tmp-dir). About two minutes with the
defaults. Four tables and a verdict per target:

1. Durable creates/s: POST /v1/pets with wrk -t1 -cN (N = 1, 8, 32), a warm-up and then a
   timed run each, against the in-memory store and the data-file store (fresh file). Target:
   at 32 clients the file store reaches at least half the in-memory rate (group commit).
2. Start-up and memory with 1,000,000 pets in the data file (written by this script, page
   cache warm), --startup-runs starts: seconds from spawn to the first 200 from /readyz, VmRSS
   once ready, VmHWM (peak); bytes per pet are that VmRSS minus the VmRSS on an empty file,
   over the pets. Targets, on the medians: ready within 3 s, under 250 MB, under 200 bytes a pet.
3. listPets latency with 1,000,000 pets vs. 1,000, `wrk -t1 -c1` (one request at a time: the
   cost of a request, no queueing), 3 rounds of 1 s alternating between the two servers:
   limit 20; limit 20 with status=available; both again deep in the pages (after = pets - 100).
   Target: p50 with 1,000,000 pets within 1.5x of p50 with 1,000 (median of per-round ratios;
   mean and p99 are shown, not judged).
4. Create latency with 1,000,000 pets stored vs. 10 (wrk -t1 -c1, file store). Target: mean
   and p50 with 1,000,000 pets within 1.5x of those with 10 (p99 is shown, not judged: one
   slow fsync moves it).

"server CPU" is the CPU time the server used during a run, in cores: near 100% means the
server's one core is the limit, not the disk. Exit status: 0 when every target passes, 1 when
one fails, 2 when the benchmark can't run.
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
    Pinning,
    Server,
    Target,
    WrkResult,
    alternate,
    argument_parser,
    ms,
    p50_p99,
    pair_ratios,
    parse_arguments,
    print_table,
    run_benchmark,
    run_wrk,
    serve,
    verdict,
    wrk_requests,
)

CLIENTS: Final = (1, 8, 32)
THROUGHPUT_RATIO_TARGET: Final = 0.5  # file/memory creates/s at 32 clients, at least
READY_TARGET_S: Final = 3.0
RSS_TARGET_MB: Final = 250.0
BYTES_PER_PET_TARGET: Final = 200.0
LIST_STORE: Final = 1000  # listPets at --pets pets is compared with listPets at this many
LIST_ROUNDS: Final = 3
LIST_SECONDS: Final = 1
LATENCY_RATIO_TARGET: Final = 1.5  # latency with many pets / with few, at most
CREATE_STORE: Final = 10  # createPet at --pets pets is compared with createPet at this many


@dataclass(frozen=True)
class Options:
    duration: int
    warmup: int
    pets: int
    startup_runs: int


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


# --------------------------------------------------------------------------- data files

_STATUSES: Final = (
    ',"status":"available"}\n',
    ',"status":"pending"}\n',
    ',"status":"sold"}\n',
    "}\n",
)


def write_fixture(path: Path, count: int) -> None:
    """A data file of `count` pets, ids 1..count, one JSON object a line, as the store writes.

    status cycles available, pending, sold, absent; categoryId is id % 100. The file is
    fsynced: left dirty, its writeback would land in the journal commits of the fsyncs timed
    next and slow them down.
    """
    chunk = 100_000
    with path.open("w", encoding="ascii") as file:
        for start in range(1, count + 1, chunk):
            file.writelines(
                f'{{"id":{i},"name":"pet-{i}","categoryId":{i % 100}{_STATUSES[i % 4]}'
                for i in range(start, min(start + chunk, count + 1))
            )
        file.flush()
        os.fsync(file.fileno())


def fdatasync_ms(directory: Path, appends: int = 300) -> list[float]:
    """Milliseconds each of `appends` small appends plus fdatasync takes in `directory`: what
    one durable create costs at least on this disk, before any HTTP."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        times = []
        for number in range(appends):
            began = time.perf_counter()
            os.write(fd, b'{"id":%d,"name":"probe","categoryId":1}\n' % number)
            os.fdatasync(fd)
            times.append((time.perf_counter() - began) * 1000)
        return times
    finally:
        os.close(fd)
        path.unlink()


def count_lines(path: Path) -> int:
    with path.open("rb") as file:
        return sum(block.count(b"\n") for block in iter(lambda: file.read(1 << 20), b""))


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


# --------------------------------------------------------------------------- 2. start-up, memory


def bench_startup(tmp: Path, fixture: Path, options: Options, pin: Pinning) -> list[Target]:
    with serve(tmp / "empty.jsonl", tmp / "empty.log", pin) as server:
        server.wait_ready()
        empty_kib = server.status_kib("VmRSS")
    rows = [["empty file", "", f"{empty_kib * 1024 / 1e6:.1f}", "", ""]]
    ready_s: list[float] = []
    rss_kib: list[int] = []
    for number in range(1, options.startup_runs + 1):
        with serve(fixture, tmp / "startup.log", pin) as server:
            ready_s.append(server.wait_ready())
            rss_kib.append(server.status_kib("VmRSS"))
            peak_kib = server.status_kib("VmHWM")
        per_pet = (rss_kib[-1] - empty_kib) * 1024 / options.pets
        rows.append(
            [
                f"run {number}",
                f"{ready_s[-1]:.2f}",
                f"{rss_kib[-1] * 1024 / 1e6:.1f}",
                f"{peak_kib * 1024 / 1e6:.1f}",
                f"{per_pet:.0f}",
            ]
        )
    print_table(
        f"2. Start-up and memory with {options.pets:,} pets in the data file "
        f"({fixture.stat().st_size / 1e6:.0f} MB)",
        ["server", "spawn to ready s", "VmRSS MB once ready", "VmHWM (peak) MB", "bytes per pet"],
        rows,
    )
    ready = statistics.median(ready_s)
    rss_mb = statistics.median(rss_kib) * 1024 / 1e6
    per_pet = (statistics.median(rss_kib) - empty_kib) * 1024 / options.pets
    return [
        Target(
            f"ready within {READY_TARGET_S:g} s with {options.pets:,} pets (median)",
            f"{ready:.2f} s",
            ready <= READY_TARGET_S,
        ),
        Target(
            f"resident under {RSS_TARGET_MB:g} MB with {options.pets:,} pets (median)",
            f"{rss_mb:.0f} MB",
            rss_mb < RSS_TARGET_MB,
        ),
        Target(
            f"resident bytes per pet at {options.pets:,} pets < {BYTES_PER_PET_TARGET:.0f}",
            f"{per_pet:.0f}",
            per_pet < BYTES_PER_PET_TARGET,
        ),
    ]


# --------------------------------------------------------------------------- 3. listPets


def bench_list(tmp: Path, fixture: Path, options: Options, pin: Pinning) -> list[Target]:
    small = tmp / "list-small.jsonl"
    write_fixture(small, LIST_STORE)
    with serve(fixture, tmp / "big.log", pin) as many, serve(small, tmp / "small.log", pin) as few:
        many.wait_ready()
        few.wait_ready()
        return list_latency(
            few, many, pin, pets=options.pets, warmup=options.warmup, store="data file"
        )


def list_latency(  # noqa: PLR0913 - the two servers, what they hold and the run's settings
    few: Server, many: Server, pin: Pinning, *, pets: int, warmup: int, store: str
) -> list[Target]:
    """listPets of `few` (LIST_STORE pets) against `many` (`pets` pets), the table of `store`
    and a target per request."""
    variants = (
        ("limit=20", ""),
        ("limit=20 status=available", "&status=available"),
        ("limit=20, deep (after)", "&after={deep}"),
        ("limit=20 status=available, deep", "&status=available&after={deep}"),
    )
    rows = []
    targets = []
    sizes = ((few, LIST_STORE), (many, pets))
    for title, query in variants:
        print(f"  listPets {title} at {LIST_STORE:,} and {pets:,} pets ...", file=sys.stderr)
        requests = {
            count: wrk_requests(200, "/v1/pets?limit=20" + query.format(deep=count - 100))
            for _, count in sizes
        }
        loads = {count: (server, requests[count]) for server, count in sizes}
        runs = alternate(
            loads,
            connections=1,
            rounds=LIST_ROUNDS,
            seconds=LIST_SECONDS,
            warmup=warmup,
            pin=pin,
        )
        small, large = runs[LIST_STORE], runs[pets]
        p50_ratio = statistics.median(pair_ratios(large, small, lambda run: run.p50_ms))
        mean_ratio = statistics.median(pair_ratios(large, small, lambda run: run.mean_ms))
        passed = p50_ratio <= LATENCY_RATIO_TARGET
        rows.append(
            [
                title,
                *p50_p99(small),
                *p50_p99(large),
                f"{p50_ratio:.2f}x",
                f"{mean_ratio:.2f}x",
                f"<= {LATENCY_RATIO_TARGET:g}x {verdict(passed)}",
            ]
        )
        targets.append(
            Target(
                f"listPets {title}: p50 at {pets:,} pets <= {LATENCY_RATIO_TARGET:g}x "
                f"of {LIST_STORE:,}",
                f"{p50_ratio:.2f}x",
                passed,
            )
        )
    k, m = f"{LIST_STORE // 1000}k", f"{pets / 1e6:g}M"
    print_table(
        f"3. listPets latency, {store}, wrk -t1 -c1, {LIST_ROUNDS} rounds of {LIST_SECONDS} s per "
        "server, access log off (ms; deep: after = pets - 100)",
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


# --------------------------------------------------------------------------- 4. create latency


def bench_latency(tmp: Path, fixture: Path, options: Options, pin: Pinning) -> Target:
    small = tmp / "small.jsonl"
    write_fixture(small, CREATE_STORE)
    results: list[WrkResult] = []
    for path in (small, fixture):
        with serve(path, tmp / "latency.log", pin) as server:
            server.wait_ready()
            run_wrk(server, 1, options.warmup, pin)
            results.append(run_wrk(server, 1, options.duration, pin))
    few, many = results
    ratios = [many.mean_ms / few.mean_ms, many.p50_ms / few.p50_ms, many.p99_ms / few.p99_ms]
    print_table(
        f"4. Create latency, file store, wrk -t1 -c1, {options.duration} s after a "
        f"{options.warmup} s warm-up (ms)",
        ["pets stored", "requests/s", *MEASURED],
        [
            [f"{CREATE_STORE:,}", *measure(few)],
            [f"{options.pets:,}", *measure(many)],
            [f"ratio {options.pets:,}/{CREATE_STORE}", "", *(f"{r:.2f}x" for r in ratios), "", ""],
        ],
    )
    return Target(
        f"create latency with {options.pets:,} pets within {LATENCY_RATIO_TARGET:g}x "
        f"of {CREATE_STORE} (mean, p50)",
        f"{ratios[0]:.2f}x, {ratios[1]:.2f}x",
        max(ratios[:2]) <= LATENCY_RATIO_TARGET and many.errors == few.errors == 0,
    )


# --------------------------------------------------------------------------- main


def bench(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    probe = statistics.quantiles(fdatasync_ms(tmp), n=100)
    print(
        f"data files in {tmp}; an append + fdatasync there takes "
        f"p50 {probe[49]:.2f} ms, p99 {probe[98]:.2f} ms"
    )
    targets = [bench_throughput(tmp, options, pin)]
    fixture = tmp / "large.jsonl"
    began = time.perf_counter()
    write_fixture(fixture, options.pets)
    print(f"\n(wrote {options.pets:,} pets in {time.perf_counter() - began:.1f} s)")
    targets += bench_startup(tmp, fixture, options, pin)
    targets += bench_list(tmp, fixture, options, pin)
    # Last: its creates append to the fixture.
    targets.append(bench_latency(tmp, fixture, options, pin))
    return targets


def main(argv: Sequence[str]) -> int:
    parser = argument_parser(
        "bench/durability.py",
        "Durable creates/s; start-up, memory, listPets and create latency with 1M pets.",
        duration=5,
    )
    parser.add_argument("--pets", type=int, default=1_000_000, help="pets in the large file")
    parser.add_argument("--startup-runs", type=int, default=3, help="starts to time")
    flags = parse_arguments(parser, argv)
    if flags.pets <= LIST_STORE or flags.startup_runs < 1:
        parser.error(f"--pets must be above {LIST_STORE}, --startup-runs at least 1")
    chosen = Options(flags.duration, flags.warmup, flags.pets, flags.startup_runs)
    return run_benchmark(lambda tmp, pin: bench(tmp, chosen, pin), flags.tmp_dir, enforced=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
