"""Benchmark of the database store (PostgreSQL): creates, reads, 1,000,000 rows, two replicas.

Run from the repository root (`make bench` runs it after bench/idempotent_creates.py):

    .venv/bin/python bench/replicas.py [--duration 2] [--warmup 1] [--pets 1000000]
        [--tmp-dir DIR]

It needs wrk, taskset and PostgreSQL's server (Debian: `apt-get install postgresql`): it
starts a throwaway cluster as the test suite does (tests/postgres.py: a temp dir of its own,
unix socket only, fsync and synchronous_commit on, as a deployment runs it) and destroys it at
the end. Servers run as `python app.py --database URL --log-level warning` (`--data FILE`, or
in memory, for the comparisons), each table's on a new database, pinned to core 0 as in the
other benchmarks, wrk to core 1; PostgreSQL is not pinned (no core here is its own). About
three minutes with the defaults. Four tables:

1. Durable creates/s: POST /v1/pets with wrk -t1 -cN (N = 1, 8, 32) against the data-file
   store and the database store, a warm-up run each, then 3 rounds of --duration seconds,
   the two alternating. No target; database/file is the median of the rounds' ratios of
   requests/s (by the wall clock: the database store's work is partly PostgreSQL's).
2. getPet (id 4242) and listPets limit=20, wrk -t1 -c32, against the in-memory store, both
   filled with the same 10,000 pets by POST first (bench/run.py's fill), 3 rounds alternating.
   No target; database/memory is the median of the rounds' ratios.
3. listPets latency with 1,000,000 rows vs. 1,000 (written with SQL as the service stores
   them, the pets of bench/durability.py's data file), the four requests and the target of
   bench/durability.py's table 3: p50 at 1,000,000 within 1.5x of p50 at 1,000.
4. Two replicas against one on one database: creates from 32 clients, all against one
   replica or 16 against each of two at once (two wrk processes, their counts added), 3
   rounds alternating. No target. What to expect: the replicas serialize on the counter row
   through each commit (a batch's statement updates `petstore_ids` and holds the row's lock
   until its commit has flushed the WAL), so their commits go one after the other as one
   replica's do, and a second replica can gain only through bigger batches, its creates
   piling up while the other commits. But a replica's batch is bounded by its own clients
   (those not being answered meanwhile), and with 32 clients in all each has half of them: expect
   two/one near 1 or below, with smaller batches ("pets a commit"). Both replicas share core
   0, so the service's CPU is the same either way.

Requests/s and latencies are over every request of the timed rounds together; "server CPU" is
the CPU the service used during its runs (in cores, 100%: its one core busy), "postgres CPU"
the cluster's processes during the same runs, and "pets a commit" the rows the runs stored over
the transactions that stored them (their distinct xmin): the mean batch of the writer. Exit
status: 0 when every target passes, 1 when one fails, 2 when the benchmark can't run.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
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
    pair_ratios,
    parse_arguments,
    pooled,
    print_table,
    run_benchmark,
    run_wrk,
    serve,
    take_turns,
    wrk_load,
    wrk_requests,
)
from durability import LIST_STORE, MEASURED, fdatasync_ms, list_latency, measure
from run import CONNECTIONS, FILL, GET_ID, fill

# The cluster the test suite starts (tests/postgres.py) lives in the repository root's `tests`
# package; appended, so that bench/ modules still come first.
sys.path.append(str(ROOT))
from tests.postgres import Cluster

CLIENTS: Final = (1, 8, 32)
ROUNDS: Final = 3
REPLICA_CLIENTS: Final = 32  # creates against the replicas: all on one, or half on each of two


@dataclass(frozen=True)
class Options:
    duration: int
    warmup: int
    pets: int


# --------------------------------------------------------------------------- the cluster


@contextlib.contextmanager
def postgres() -> Iterator[Cluster]:
    """A throwaway cluster, started, destroyed on the way out."""
    try:
        cluster = Cluster()
    except RuntimeError as error:  # not installed, or initdb failed: the text says which
        raise BenchError(str(error)) from None
    try:
        _start(cluster)
        yield cluster
    finally:
        cluster.destroy()


def _start(cluster: Cluster) -> None:
    """Start the cluster from every core: this script is pinned to wrk's by now, and the
    cluster's processes inherit where they may run from it."""
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # the kernel keeps the allowed ones
    try:
        cluster.start()
    except RuntimeError as error:
        raise BenchError(str(error)) from None
    finally:
        os.sched_setaffinity(0, pinned)
    # initdb leaves its files unsynced (--no-sync): written back during the first runs, they
    # would land in the journal commits of the fsyncs timed there.
    os.sync()


def postgres_cpu_seconds(cluster: Cluster) -> float:
    """CPU time the cluster has used so far: the postmaster with the children it reaped, and
    every child still running (a backend a connection, the WAL writer, the checkpointer ...)."""
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            fields = stat.read_text().rpartition(")")[2].split()
            if int(stat.parent.name) == postmaster:
                ticks += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
            elif int(fields[1]) == postmaster:
                ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def next_id(cluster: Cluster, url: str) -> int:
    return int(cluster.sql("SELECT next_id FROM petstore_ids", Cluster.name(url)))


def write_rows(cluster: Cluster, url: str, count: int) -> None:
    """`count` pets, ids 1..count, written with SQL as the service stores them (bench/
    durability.py's data file: status cycles available, pending, sold, absent; categoryId is
    id % 100), the counter row after them. The service made the tables already."""
    # ANALYZE: what autovacuum would do after such an insert, before the planner needs it.
    # CHECKPOINT: the new pages written out now rather than by a checkpoint while timing.
    cluster.sql(
        f"""INSERT INTO petstore_pets (id, status, pet)
        SELECT id, status, format('{{"id":%s,"name":"pet-%s","categoryId":%s%s}}',
            id, id, id % 100, CASE WHEN status IS NULL THEN '' ELSE
            format(',"status":"%s"', status) END)::json
        FROM generate_series(1, {count}) AS id,
            LATERAL (SELECT (ARRAY['available', 'pending', 'sold', NULL])[id % 4 + 1] AS status)
            AS chosen;
        UPDATE petstore_ids SET next_id = {count} + 1, pets = {count};
        ANALYZE petstore_pets""",  # noqa: S608 - only integers of ours go in
        Cluster.name(url),
    )
    cluster.sql("CHECKPOINT")


# --------------------------------------------------------------------------- watching the database


@dataclass
class Watched:
    """What the cluster did during each run of a load against one database: the CPU it used
    (in cores) and the ids stored (next_id before and after). take_turns runs a load first to
    warm up: the first entry is that run's, not counted."""

    cluster: Cluster
    url: str
    cores: list[float] = field(default_factory=list)
    ids: list[tuple[int, int]] = field(default_factory=list)

    def watch(self, load: Callable[[int], WrkResult]) -> Callable[[int], WrkResult]:
        def watched(seconds: int) -> WrkResult:
            first = next_id(self.cluster, self.url)
            cpu, began = postgres_cpu_seconds(self.cluster), time.perf_counter()
            result = load(seconds)
            used = postgres_cpu_seconds(self.cluster) - cpu
            self.cores.append(used / (time.perf_counter() - began))
            self.ids.append((first, next_id(self.cluster, self.url)))
            return result

        return watched

    def postgres_cpu(self) -> str:
        return f"{statistics.fmean(self.cores[1:]):.0%}"

    def per_commit(self) -> str:
        """Pets a transaction stored in the timed runs: their rows over their distinct xmin."""
        ranges = " OR ".join(f"id >= {first} AND id < {end}" for first, end in self.ids[1:])
        query = "SELECT count(*), count(DISTINCT xmin::text) FROM petstore_pets WHERE "
        rows, transactions = self.cluster.sql(query + ranges, Cluster.name(self.url)).split("|")
        return f"{int(rows) / int(transactions):.1f}" if int(transactions) else ""


def over(url: str, tmp: Path, name: str, pin: Pinning) -> contextlib.AbstractContextManager[Server]:
    """serve(): the service over the database at `url`, its log `name`.log."""
    return serve(None, tmp / f"{name}.log", pin, extra=("--database", url))


# --------------------------------------------------------------------------- 1. creates/s


def rate(run: WrkResult) -> float:
    """What the ratios compare: requests answered per second of wall-clock time (the database
    store's work is shared with PostgreSQL's processes, so not its server's CPU time alone)."""
    return run.per_second


def bench_creates(tmp: Path, cluster: Cluster, options: Options, pin: Pinning) -> None:
    url = cluster.new_database()
    with (
        serve(tmp / "creates.jsonl", tmp / "file.log", pin) as file,
        over(url, tmp, "creates", pin) as database,
    ):
        file.wait_ready()
        database.wait_ready()
        rows: dict[tuple[str, int], list[str]] = {}
        answered = 0
        for clients in CLIENTS:
            print(f"  creates, {clients} client(s) ...", file=sys.stderr, flush=True)
            watched = Watched(cluster, url)
            runs = take_turns(
                {
                    "file": wrk_load(file, clients, pin),
                    "database": watched.watch(wrk_load(database, clients, pin)),
                },
                rounds=ROUNDS,
                seconds=options.duration,
                warmup=options.warmup,
            )
            ratio = statistics.median(pair_ratios(runs["database"], runs["file"], rate))
            rows["file", clients] = [*measure(pooled(runs["file"])), "", "", "1.00"]
            rows["database", clients] = [
                *measure(pooled(runs["database"])),
                watched.postgres_cpu(),
                watched.per_commit(),
                f"{ratio:.2f}",
            ]
            answered += sum(run.created for run in runs["database"])
        stored = int(cluster.sql("SELECT count(*) FROM petstore_pets", Cluster.name(url)))
    print_table(
        f"1. Durable creates: wrk -t1 -cN, {ROUNDS} rounds of {options.duration} s per store "
        f"after a {options.warmup} s warm-up, alternating (latency in ms)",
        [
            "store",
            "clients",
            "requests/s",
            *MEASURED,
            "postgres CPU",
            "pets a commit",
            "database/file",
        ],
        [
            [store, str(clients), *rows[store, clients]]
            for store in ("file", "database")
            for clients in CLIENTS
        ],
    )
    print(
        f"database afterwards: {stored:,} pets; its timed runs saw {answered:,} answers 201", end=""
    )
    print(" (ok: at least as many)" if stored >= answered else " (PETS MISSING!)")


# --------------------------------------------------------------------------- 2. reads


def bench_reads(tmp: Path, cluster: Cluster, options: Options, pin: Pinning) -> None:
    url = cluster.new_database()
    with serve(None, tmp / "memory.log", pin) as memory, over(url, tmp, "reads", pin) as database:
        memory.wait_ready()
        database.wait_ready()
        print(f"  filling both stores with {FILL:,} pets by POST ...", file=sys.stderr, flush=True)
        began = time.perf_counter()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda server: fill(server, FILL), (memory, database)))
        filled = time.perf_counter() - began
        rows = []
        for title, path in (
            (f"getPet (id {GET_ID})", f"/v1/pets/{GET_ID}"),
            ("listPets limit=20", "/v1/pets?limit=20"),
        ):
            print(f"  {title} ...", file=sys.stderr, flush=True)
            requests = wrk_requests(200, path)
            watched = Watched(cluster, url)
            runs = take_turns(
                {
                    "memory": wrk_load(memory, CONNECTIONS, pin, requests),
                    "database": watched.watch(wrk_load(database, CONNECTIONS, pin, requests)),
                },
                rounds=ROUNDS,
                seconds=options.duration,
                warmup=options.warmup,
            )
            ratio = statistics.median(pair_ratios(runs["database"], runs["memory"], rate))
            rows.append([title, "memory", *measure(pooled(runs["memory"])), "", "1.00"])
            rows.append(
                [
                    title,
                    "database",
                    *measure(pooled(runs["database"])),
                    watched.postgres_cpu(),
                    f"{ratio:.2f}",
                ]
            )
    print_table(
        f"2. Reads, {FILL:,} pets created by POST in each store ({filled:.0f} s): "
        f"wrk -t1 -c{CONNECTIONS}, {ROUNDS} rounds of {options.duration} s per store after a "
        f"{options.warmup} s warm-up, alternating (latency in ms)",
        ["request", "store", "requests/s", *MEASURED, "postgres CPU", "database/memory"],
        rows,
    )


# --------------------------------------------------------------------------- 3. listPets


def bench_list(tmp: Path, cluster: Cluster, options: Options, pin: Pinning) -> list[Target]:
    many_url, few_url = cluster.new_database(), cluster.new_database()
    with over(many_url, tmp, "list-many", pin) as many, over(few_url, tmp, "list-few", pin) as few:
        many.wait_ready()  # it made the tables
        few.wait_ready()
        began = time.perf_counter()
        write_rows(cluster, many_url, options.pets)
        write_rows(cluster, few_url, LIST_STORE)
        print(f"\n(wrote {options.pets:,} rows in {time.perf_counter() - began:.1f} s)")
        return list_latency(
            few, many, pin, pets=options.pets, warmup=options.warmup, store="database"
        )


# --------------------------------------------------------------------------- 4. replicas


def bench_replicas(tmp: Path, cluster: Cluster, options: Options, pin: Pinning) -> None:
    url = cluster.new_database()
    with over(url, tmp, "replica-1", pin) as first, over(url, tmp, "replica-2", pin) as second:
        first.wait_ready()
        second.wait_ready()
        print("  replicas ...", file=sys.stderr, flush=True)
        half = REPLICA_CLIENTS // 2

        def both(seconds: int) -> WrkResult:
            with ThreadPoolExecutor(2) as pool:
                runs = pool.map(lambda server: run_wrk(server, half, seconds, pin), (first, second))
                return pooled(list(runs), at_once=True)

        one, two = Watched(cluster, url), Watched(cluster, url)
        runs = take_turns(
            {"one": one.watch(wrk_load(first, REPLICA_CLIENTS, pin)), "two": two.watch(both)},
            rounds=ROUNDS,
            seconds=options.duration,
            warmup=options.warmup,
        )
    ratio = statistics.median(pair_ratios(runs["two"], runs["one"], rate))
    print_table(
        f"4. Replicas on one database: creates from {REPLICA_CLIENTS} clients against one "
        f"replica, or {half} against each of two at once; {ROUNDS} rounds of {options.duration} "
        f"s after a {options.warmup} s warm-up, alternating (latency in ms)",
        ["replicas", "requests/s", *MEASURED, "postgres CPU", "pets a commit", "two/one"],
        [
            ["one", *measure(pooled(runs["one"])), one.postgres_cpu(), one.per_commit(), "1.00"],
            [
                "two",
                *measure(pooled(runs["two"])),
                two.postgres_cpu(),
                two.per_commit(),
                f"{ratio:.2f}",
            ],
        ],
    )


# --------------------------------------------------------------------------- main


def bench(tmp: Path, options: Options, pin: Pinning) -> list[Target]:
    with postgres() as cluster:
        settings = ", ".join(
            f"{name} {cluster.sql(f'SHOW {name}').strip()}"
            for name in ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
        )
        print(f"PostgreSQL in {cluster.directory}: {settings}")
        for what, directory in (("data files", tmp), ("the cluster", cluster.directory)):
            probe = statistics.quantiles(fdatasync_ms(directory), n=100)
            print(
                f"{what} in {directory}: an append + fdatasync there takes "
                f"p50 {probe[49]:.2f} ms, p99 {probe[98]:.2f} ms"
            )
        bench_creates(tmp, cluster, options, pin)
        bench_reads(tmp, cluster, options, pin)
        targets = bench_list(tmp, cluster, options, pin)
        bench_replicas(tmp, cluster, options, pin)
    return targets


def main(argv: Sequence[str]) -> int:
    parser = argument_parser(
        "bench/replicas.py",
        "The database store: creates/s against the data file, reads against memory, listPets "
        "at 1M rows, two replicas against one.",
        duration=2,
    )
    parser.add_argument("--pets", type=int, default=1_000_000, help="rows in the large database")
    flags = parse_arguments(parser, argv)
    if flags.pets <= LIST_STORE:
        parser.error(f"--pets must be above {LIST_STORE}")
    chosen = Options(flags.duration, flags.warmup, flags.pets)
    return run_benchmark(lambda tmp, pin: bench(tmp, chosen, pin), flags.tmp_dir, enforced=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
