"""Helpers for the benchmarks: start and stop servers, drive them with wrk, print tables.

Every server is started through `spawn()` (`serve()` for `python app.py`), a context manager
that stops the process on the way out whatever happened (error, Ctrl-C, SIGTERM);
`run_benchmark()` owns the temp dir that holds data files and logs. Latencies are in
milliseconds, timed per request by the wrk scripts, not by wrk (bench/timing.lua says why). A
run counts only the answers with the expected status (200, 201, 401); "errors" are the other
answers, socket errors and timeouts.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import Final, TypeVar

ROOT: Final = Path(__file__).resolve().parent.parent
BENCH: Final = Path(__file__).resolve().parent
CREATE_SCRIPT: Final = BENCH / "create_pet.lua"
REQUEST_SCRIPT: Final = BENCH / "request.lua"
API_KEY: Final = "bench-key-0123456789"
BUSY_LOAD: Final = 0.5  # a 1-minute load average above this before the start: noisy numbers
K = TypeVar("K")


class BenchError(Exception):
    """The benchmark can't go on (a server did not start, wrk failed); the text says why."""


# --------------------------------------------------------------------------- CPU pinning


@dataclass(frozen=True)
class Pinning:
    """Command prefixes that put the server and the load generator on cores of their own."""

    server: tuple[str, ...]
    client: tuple[str, ...]
    note: str


def pinning() -> Pinning:
    """Server on core 0, wrk (and this script) on core 1, when taskset and two cores exist."""
    taskset = shutil.which("taskset")
    cores = sorted(os.sched_getaffinity(0))
    if taskset is None or len(cores) < 2:
        reason = "taskset not found" if taskset is None else f"only {len(cores)} core(s)"
        return Pinning((), (), f"not pinned ({reason}): server and wrk share the CPUs")
    server_core, client_core = cores[0], cores[1]
    os.sched_setaffinity(0, {client_core})  # keep this script's polling off the server's core
    return Pinning(
        (taskset, "-c", str(server_core)),
        (taskset, "-c", str(client_core)),
        f"server pinned to core {server_core}, wrk to core {client_core} (taskset)",
    )


# --------------------------------------------------------------------------- the server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    """A running `python app.py`; its output goes to `log`."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    spawned_at: float  # time.perf_counter() just before the spawn

    def log_tail(self, lines: int = 10) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def ready(self) -> bool:
        """Whether GET /readyz answers 200 now (False while nothing listens yet)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            connection.request("GET", "/readyz")
            return connection.getresponse().status == 200
        except OSError:
            return False
        finally:
            connection.close()

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Poll /readyz every 5 ms; the seconds from the spawn to the first 200."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.ready():
                return time.perf_counter() - self.spawned_at
            if self.process.poll() is not None:
                raise BenchError(
                    f"the server exited with status {self.process.returncode}:\n{self.log_tail()}"
                )
            time.sleep(0.005)
        raise BenchError(f"the server was not ready within {timeout:.0f} s:\n{self.log_tail()}")

    def cpu_seconds(self) -> float:
        """CPU time the server has used so far, all threads, user and system."""
        with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rpartition(")")[2].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
        return (utime + stime) / os.sysconf("SC_CLK_TCK")

    def status_kib(self, field: str) -> int:
        """A memory figure of /proc/PID/status (VmRSS, VmHWM ...), in KiB."""
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name == field:
                    return int(value.split()[0])
        raise BenchError(f"/proc/{self.process.pid}/status has no {field}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def spawn(
    argv: Sequence[str], log: Path, port: int, environment: Mapping[str, str] | None = None
) -> Iterator[Server]:
    """Spawn a server that will listen on `port`, output to `log`; stopped on the way out.

    It yields at once, without waiting for readiness, so the caller can time the start. The
    server must answer GET /readyz (Server.wait_ready). Started in the repository root.
    """
    with log.open("ab") as output:
        spawned_at = time.perf_counter()
        # taskset execs the interpreter, so the pid is the server's own (for /proc/PID/status).
        process = subprocess.Popen(  # noqa: S603 - a fixed argv of our own, no shell
            argv, stdout=output, stderr=subprocess.STDOUT, env=environment, cwd=ROOT
        )
    try:
        yield Server(process, port, log, spawned_at)
    finally:
        _stop(process)


@contextlib.contextmanager
def serve(  # noqa: PLR0913 - the tree to run is a sixth, named
    data: Path | None,
    log: Path,
    pin: Pinning,
    log_level: str = "warning",
    extra: Sequence[str] = (),
    *,
    root: Path = ROOT,
) -> Iterator[Server]:
    """Spawn `python app.py` (file store on `data`, else in memory); stopped on the way out.

    `log_level` "info" turns the service's access log on (to stdout, i.e. to `log`); `extra`
    are more flags; `root` the tree whose app.py runs (a copy changed for a comparison). It
    yields at once, without waiting for readiness.
    """
    port = free_port()
    flags = f"--port {port} --api-key {API_KEY} --log-level {log_level}".split()
    argv = [*pin.server, sys.executable, str(root / "app.py"), *flags, *extra]
    if data is not None:
        argv += ["--data", str(data)]
    # The flags say everything: no PETSTORE_* setting of the caller's shell leaks in.
    environment = {name: v for name, v in os.environ.items() if not name.startswith("PETSTORE_")}
    with spawn(argv, log, port, environment) as server:
        yield server


# --------------------------------------------------------------------------- callgrind


def callgrind_control(*args: str) -> None:
    control = shutil.which("callgrind_control") or "callgrind_control"
    done = subprocess.run(  # noqa: S603 - a fixed argv of our own, no shell
        [control, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BenchError(f"callgrind_control {' '.join(args)}: {done.stdout}{done.stderr}")


def newest_total(dumps: Path, pid: int) -> int:
    """The instruction count of the newest dump of this process."""
    newest = max(dumps.glob(f"callgrind.{pid}.*"), key=lambda path: int(path.suffix[1:]))
    for line in newest.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise BenchError(f"{newest} has no summary line")


# --------------------------------------------------------------------------- wrk


@dataclass(frozen=True)
class WrkResult:
    """One wrk run: requests answered as expected (creates: 201), their latencies in ms."""

    created: int  # answers with the expected status (201 for create_pet.lua)
    seconds: float
    mean_ms: float
    p50_ms: float
    p99_ms: float
    errors: int  # other answers, socket errors and timeouts
    server_cpu: float  # CPU the server used during the run, in cores (1.0: one core busy)
    server_cpu_seconds: float  # the same, in CPU seconds
    latencies_us: tuple[float, ...] = field(repr=False)  # one per expected answer

    @property
    def per_second(self) -> float:
        return self.created / self.seconds if self.seconds else 0.0

    @property
    def per_cpu_second(self) -> float:
        """Answers per second of the server's CPU time: what a server on a core of its own
        would do, nearly unmoved by what else runs on a shared machine."""
        return self.created / self.server_cpu_seconds if self.server_cpu_seconds > 0 else 0.0


def wrk_path() -> str | None:
    return shutil.which("wrk")


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    for other in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(other, signal.SIG_IGN)  # a second signal must not cut the clean-up short
    raise SystemExit(128 + signum)  # unwinds the with-blocks: servers and wrk stopped


def prepare() -> bool:
    """Whether a benchmark can run (wrk is there, else say how to get it); from here on
    SIGTERM, SIGHUP and Ctrl-C unwind it so that every server and temp dir is cleaned up."""
    if wrk_path() is None:
        print(
            "bench: wrk is not installed. Install it with `apt-get install wrk` (Debian, Ubuntu),"
            " `brew install wrk` (macOS), or build it from https://github.com/wg/wrk",
            file=sys.stderr,
        )
        return False
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _exit_on_signal)
    return True


@dataclass(frozen=True)
class WrkRequests:
    """What wrk sends: a Lua script (that prints WRK_RESULT and WRK_LATENCIES_US lines in
    done(), as create_pet.lua does), the path of the URL, and the script's arguments."""

    script: Path
    path: str
    args: tuple[str, ...]


CREATES: Final = WrkRequests(CREATE_SCRIPT, "/v1/pets", (API_KEY,))


def wrk_requests(status: int, path: str, key: str = API_KEY, ids: int = 0) -> WrkRequests:
    """GET `path` again and again (request.lua), expecting `status`; with `ids`, "{id}" in the
    path goes through 1..ids."""
    args = (key, str(status), "GET", path) + ((str(ids),) if ids else ())
    return WrkRequests(REQUEST_SCRIPT, "", args)


def run_wrk(
    server: Server, connections: int, seconds: int, pin: Pinning, requests: WrkRequests = CREATES
) -> WrkResult:
    """`wrk -t1 -cN -dS -s SCRIPT URL -- ARGS` against the server: createPet requests
    (create_pet.lua) unless `requests` says otherwise."""
    wrk = wrk_path()
    if wrk is None:
        raise BenchError("wrk not found")
    url = f"http://127.0.0.1:{server.port}{requests.path}"
    flags = f"-t1 -c{connections} -d{seconds}s --timeout 10s -s {requests.script} {url} --"
    argv = [*pin.client, wrk, *flags.split(), *requests.args]
    cpu_before, began = server.cpu_seconds(), time.perf_counter()
    # On any exception (SIGTERM's SystemExit too) subprocess.run kills wrk before raising on.
    done = subprocess.run(  # noqa: S603 - a fixed argv of our own, no shell
        argv, capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    cpu_used = server.cpu_seconds() - cpu_before
    server_cpu = cpu_used / (time.perf_counter() - began)
    numbers: dict[str, int] | None = None
    latencies_us: list[float] = []
    for line in done.stdout.splitlines():
        if line.startswith("WRK_RESULT "):
            numbers = json.loads(line.removeprefix("WRK_RESULT "))
        elif line.startswith("WRK_LATENCIES_US"):
            latencies_us = [float(value) for value in line.split()[1:]]
    if numbers is None:
        raise BenchError(f"wrk failed (status {done.returncode}):\n{done.stdout}{done.stderr}")
    if len(latencies_us) < 2:
        raise BenchError(
            f"hardly any request got the expected answer: {numbers}\n{server.log_tail()}"
        )
    errors = sum(
        numbers[name]
        for name in ("failed", "connect_errors", "read_errors", "write_errors", "timeouts")
    )
    return _result(
        created=numbers["created"],
        seconds=numbers["duration_us"] / 1e6,
        errors=errors,
        server_cpu=server_cpu,
        server_cpu_seconds=cpu_used,
        latencies_us=latencies_us,
    )


def _result(  # noqa: PLR0913 - the six figures of a WrkResult, all named
    *,
    created: int,
    seconds: float,
    errors: int,
    server_cpu: float,
    server_cpu_seconds: float,
    latencies_us: Sequence[float],
) -> WrkResult:
    """A WrkResult, its mean, p50 and p99 taken from the latencies."""
    percentiles = statistics.quantiles(latencies_us, n=100)
    return WrkResult(
        created=created,
        seconds=seconds,
        mean_ms=statistics.fmean(latencies_us) / 1000,
        p50_ms=percentiles[49] / 1000,
        p99_ms=percentiles[98] / 1000,
        errors=errors,
        server_cpu=server_cpu,
        server_cpu_seconds=server_cpu_seconds,
        latencies_us=tuple(latencies_us),
    )


def pooled(runs: Sequence[WrkResult], *, at_once: bool = False) -> WrkResult:
    """Runs taken as one: one after the other (requests/s and server CPU over their summed
    time), or `at_once`, wrk processes against different servers in the same seconds (the
    requests/s and the servers' CPU add up). Latencies: over every request of every run."""
    seconds = max(run.seconds for run in runs) if at_once else sum(run.seconds for run in runs)
    cpu_seconds = sum(run.server_cpu_seconds for run in runs)
    return _result(
        created=sum(run.created for run in runs),
        seconds=seconds,
        errors=sum(run.errors for run in runs),
        server_cpu=sum(run.server_cpu for run in runs) if at_once else cpu_seconds / seconds,
        server_cpu_seconds=cpu_seconds,
        latencies_us=[latency for run in runs for latency in run.latencies_us],
    )


def take_turns(
    loads: Mapping[K, Callable[[int], WrkResult]], *, rounds: int, seconds: int, warmup: int
) -> dict[K, list[WrkResult]]:
    """A warm-up run of each load (a function of the seconds to run), then `rounds` rounds of
    a run of each, in the order of `loads` and reversed every other round, so that runs of a
    round are neighbours in time."""
    for load in loads.values():
        load(warmup)
    runs: dict[K, list[WrkResult]] = {key: [] for key in loads}
    order = list(loads)
    for number in range(rounds):
        for key in order if number % 2 == 0 else order[::-1]:
            runs[key].append(loads[key](seconds))
    return runs


def wrk_load(
    server: Server, connections: int, pin: Pinning, requests: WrkRequests = CREATES
) -> Callable[[int], WrkResult]:
    """run_wrk with everything but the seconds: a load for take_turns."""
    return lambda seconds: run_wrk(server, connections, seconds, pin, requests)


def alternate(  # noqa: PLR0913 - the loads and the five settings of a schedule, all named
    loads: Mapping[K, tuple[Server, WrkRequests]],
    *,
    connections: int,
    rounds: int,
    seconds: int,
    warmup: int,
    pin: Pinning,
) -> dict[K, list[WrkResult]]:
    """take_turns with a wrk load per server: `connections` connections sending its requests."""
    return take_turns(
        {
            key: wrk_load(server, connections, pin, requests)
            for key, (server, requests) in loads.items()
        },
        rounds=rounds,
        seconds=seconds,
        warmup=warmup,
    )


def pair_ratios(
    ours: Sequence[WrkResult], theirs: Sequence[WrkResult], rate: Callable[[WrkResult], float]
) -> list[float]:
    """rate(ours) / rate(theirs) round by round: noise that lasts a few seconds hits both runs
    of a pair, and the median of the pairs drops a pair that a burst hit on one side only."""
    pairs = zip(ours, theirs, strict=True)
    return [rate(a) / rate(b) for a, b in pairs if rate(b) > 0] or [0.0]


# --------------------------------------------------------------------------- output


def ms(value: float) -> str:
    return f"{value:.2f}"


def p50_p99(runs: Sequence[WrkResult]) -> list[str]:
    """p50 and p99 in ms over every request of all the runs together."""
    percentiles = statistics.quantiles([v for run in runs for v in run.latencies_us], n=100)
    return [ms(percentiles[49] / 1000), ms(percentiles[98] / 1000)]


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = (
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return "  ".join([first, *rest]).rstrip()

    print(f"\n{title}")
    print(line(header))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print(line(row))
    sys.stdout.flush()


@dataclass(frozen=True)
class Target:
    """One target of a benchmark: what, the measured value as printed, and whether it passed."""

    what: str
    measured: str
    passed: bool


def verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


# --------------------------------------------------------------------------- a benchmark's frame


def argument_parser(
    prog: str, description: str, duration: int, warmup: int = 1
) -> argparse.ArgumentParser:
    """The options of every timed benchmark: --duration, --warmup, --tmp-dir."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--duration", type=int, default=duration, help="seconds per timed run")
    parser.add_argument("--warmup", type=int, default=warmup, help="seconds of warm-up per server")
    parser.add_argument("--tmp-dir", help="where the data files go (default: the system's)")
    return parser


def parse_arguments(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    flags = parser.parse_args(argv)
    if flags.duration < 1 or flags.warmup < 1:
        parser.error("--duration and --warmup are whole seconds, at least 1 (wrk's unit)")
    return flags


def machine(pin: Pinning) -> str:
    """Two lines on what ran the benchmark: cores, load, versions, pinning."""
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


def run_benchmark(
    body: Callable[[Path, Pinning], list[Target]],
    tmp_dir: str | None,
    *,
    enforced: bool,
    busy_hint: str = "",
) -> int:
    """Run `body(temp dir, pinning)` between the machine's description and the targets table.

    The exit status: 2 when the benchmark can't run (no wrk, a BenchError), 1 when a target
    failed and `enforced`, else 0. `busy_hint` follows the warning of a busy machine.
    """
    if not prepare():
        return 2
    pin = pinning()
    started = time.perf_counter()
    print(machine(pin))
    if (load := os.getloadavg()[0]) > BUSY_LOAD:
        print(
            f"warning: load average {load:.2f} at the start: other work shares the CPUs{busy_hint}"
        )
    sys.stdout.flush()
    with tempfile.TemporaryDirectory(prefix="petstore-bench-", dir=tmp_dir) as name:
        try:
            targets = body(Path(name), pin)
        except BenchError as error:
            print(f"\nbench: {error}", file=sys.stderr)
            return 2
    seconds = time.perf_counter() - started
    print_table(
        f"Targets ({'' if enforced else 'reported, not enforced; '}whole run {seconds:.0f} s)",
        ["target", "measured", "verdict"],
        [[t.what, t.measured, verdict(t.passed)] for t in targets],
    )
    return 1 if enforced and not all(t.passed for t in targets) else 0
