"""A PostgreSQL server of the suite's own: a fresh cluster in a temporary directory, reached by
its unix socket only, with a password and fsync on, as a deployment would run it."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NOT_INSTALLED = (
    "PostgreSQL's server is not installed, and the database tests need a real one: "
    "install it (Debian: apt-get install postgresql; .ci/run does) and run the tests again"
)
USER = "petstore"


def _binaries() -> Path:
    """The directory of initdb, pg_ctl and psql: Debian keeps them off PATH, by version."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    if found:
        return Path(found[-1]).parent
    if pg_ctl := shutil.which("pg_ctl"):
        return Path(pg_ctl).resolve().parent
    raise RuntimeError(NOT_INSTALLED)


def _version(path: str) -> int:
    return int(path.split("/")[4]) if path.split("/")[4].isdigit() else 0


class Cluster:
    """initdb, pg_ctl and psql run as the `postgres` user when the suite runs as root (both
    refuse root), in a directory of its own (pytest's are mode 0700, closed to that user)."""

    _numbers = itertools.count(1)

    def __init__(self) -> None:
        self.bin = _binaries()
        self.password = secrets.token_urlsafe(12)
        self.directory = Path(tempfile.mkdtemp(prefix="petstore-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            self._as = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        password_file = self.directory / "password"
        password_file.write_text(self.password)
        if self._as:
            os.chown(password_file, self._as["user"], self._as["group"])
        self._run(
            "initdb",
            "--pgdata",
            str(self.data),
            "--username",
            USER,
            "--pwfile",
            str(password_file),
            "--auth",
            "scram-sha-256",
            "--encoding",
            "UTF8",
            "--no-locale",
            "--no-sync",  # initdb's own files only: the server below runs with fsync on
        )
        password_file.unlink()

    def _run(self, program: str, *args: str) -> str:
        result = subprocess.run(
            [str(self.bin / program), *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.directory,
            env={**os.environ, "PGPASSWORD": self.password},
            **self._as,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{program} {' '.join(args)} failed: {result.stderr.strip()}")
        out: str = result.stdout
        return out

    def start(self) -> None:
        options = f"-c listen_addresses='' -k {self.directory} -c fsync=on -c max_connections=300"
        self._run(
            "pg_ctl", "start", "--wait", "-D", str(self.data), "-l", str(self.log), "-o", options
        )

    def stop(self, mode: str = "fast") -> None:
        """`immediate` is a crash: no checkpoint, recovery from the WAL at the next start."""
        self._run("pg_ctl", "stop", "--wait", "-D", str(self.data), "-m", mode)

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement with psql; its rows, unaligned, one a line."""
        return self._run(
            "psql", "-X", "-q", "-A", "-t", "-h", str(self.directory), "-U", USER, "-d", database,
            "-v", "ON_ERROR_STOP=1", "-c", statement,
        )  # fmt: skip

    def url(self, database: str) -> str:
        return f"postgresql://{USER}:{self.password}@/{database}?host={self.directory}"

    def new_database(self) -> str:
        """A new, empty database's URL."""
        name = f"petstore_{next(self._numbers)}"
        self.sql(f"CREATE DATABASE {name}")
        return self.url(name)

    @staticmethod
    def name(url: str) -> str:
        """The database a URL of `url()` names."""
        return urllib.parse.urlsplit(url).path.lstrip("/")

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):  # not running
            self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    @contextlib.contextmanager
    def hung(self) -> Iterator[None]:
        """The server and every backend stopped (SIGSTOP), as a network partition leaves it:
        connections stay open and nothing answers; continued at the end."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        pids = [postmaster]
        for entry in Path("/proc").iterdir():
            with contextlib.suppress(OSError):  # gone meanwhile, or no process
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if entry.name.isdigit() and int(fields[1]) == postmaster:  # its parent
                    pids.append(int(entry.name))
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
