"""Helpers for the benchmarks: start and stop servers, drive them with wrk, print tables.

Every server is started through `spawn()` (`serve()` for `python app.py`), a context manager
that stops the process on the way out whatever happened; the caller owns the temp dir that
holds its data file and log.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Final

ROOT: Final = Path(__file__).resolve().parent.parent
BENCH: Final = Path(__file__).resolve().parent
CREATE_SCRIPT: Final = BENCH / "create_pet.lua"
API_KEY: Final = "bench-key-0123456789"


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
def serve(
    data: Path | None,
    log: Path,
    pin: Pinning,
    *,
    log_level: str = "warning",
    extra: Sequence[str] = (),
) -> Iterator[Server]:
    """Spawn `python app.py` (file store on `data`, else in memory); stopped on the way out.

    `log_level` "info" turns the service's access log on (to stdout, i.e. to `log`); `extra`
    are more flags. It yields at once, without waiting for readiness.
    """
    port = free_port()
    argv = [
        *pin.server,
        sys.executable,
        str(ROOT / "app.py"),
        "--port",
        str(port),
        "--api-key",
        API_KEY,
        "--log-level",
        log_level,
        *extra,
    ]
    if data is not None:
        argv += ["--data", str(data)]
    # The flags say everything: no PETSTORE_* setting of the caller's shell leaks in.
    environment = {name: v for name, v in os.environ.items() if not name.startswith("PETSTORE_")}
    with spawn(argv, log, port, environment) as server:
        yield server


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


def run_wrk(
    server: Server, connections: int, seconds: int, pin: Pinning, requests: WrkRequests = CREATES
) -> WrkResult:
    """`wrk -t1 -cN -dS -s SCRIPT URL -- ARGS` against the server: createPet requests
    (create_pet.lua) unless `requests` says otherwise."""
    wrk = wrk_path()
    if wrk is None:
        raise BenchError("wrk not found")
    argv = [
        *pin.client,
        wrk,
        "-t1",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        "-s",
        str(requests.script),
        f"http://127.0.0.1:{server.port}{requests.path}",
        "--",
        *requests.args,
    ]
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
    percentiles = statistics.quantiles(latencies_us, n=100)
    return WrkResult(
        created=numbers["created"],
        seconds=numbers["duration_us"] / 1e6,
        mean_ms=statistics.fmean(latencies_us) / 1000,
        p50_ms=percentiles[49] / 1000,
        p99_ms=percentiles[98] / 1000,
        errors=errors,
        server_cpu=server_cpu,
        server_cpu_seconds=cpu_used,
        latencies_us=tuple(latencies_us),
    )


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


# --------------------------------------------------------------------------- output


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
