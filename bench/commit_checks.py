"""What the data file's checks cost a group commit: the time of each, in the writer thread.

Run from the repository root (`make bench` runs it):

    .venv/bin/python bench/commit_checks.py [--creates 3000] [--tmp-dir DIR]

FileStore looks at the file's path twice a group commit (datafile.FileStore._changed): before
its write, that the path still names the file it writes, as long as it left it; after the
fdatasync, that the path still names it. This makes --creates creates one at a time through a
FileStore (a fresh file in DIR, the disk you care about), so that each is a commit of its own,
and times every check where it runs, GIL and all, beside the whole create (its fdatasync
included). The first 10 % are a warm-up, not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import datafile  # noqa: E402 - the service's modules, from the repository root
from datafile import FileStore  # noqa: E402
from schemas import CategoryId, NewPet  # noqa: E402


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[int(len(ordered) * 0.99)], statistics.mean(ordered)


async def _measure(creates: int, directory: str) -> tuple[list[float], list[float], list[float]]:
    """Microseconds: the checks before the writes, the checks after them, the whole creates."""
    before: list[float] = []
    after: list[float] = []
    check = datafile.FileStore._changed

    def timed(store: FileStore, size: int | None = None) -> str | None:
        began = time.perf_counter_ns()
        try:
            return check(store, size)
        finally:
            (before if size is not None else after).append((time.perf_counter_ns() - began) / 1e3)

    setattr(datafile.FileStore, "_changed", timed)  # noqa: B010 - mypy: a method is not assigned
    store = FileStore(os.path.join(directory, "pets.jsonl"))
    await store.open()
    whole = []
    pet = NewPet(name="Rex", categoryId=CategoryId(1))
    try:
        for _ in range(creates):
            began = time.perf_counter_ns()
            await store.add(pet)
            whole.append((time.perf_counter_ns() - began) / 1e3)
    finally:
        await store.close()
        setattr(datafile.FileStore, "_changed", check)  # noqa: B010
    skip = creates // 10
    return before[skip:], after[skip:], whole[skip:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=3000)
    parser.add_argument("--tmp-dir", default=None, help="where the data file goes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.tmp_dir) as directory:
        before, after, whole = asyncio.run(_measure(args.creates, directory))
    rows = [
        ("the check before a commit's write", before),
        ("the check after its fdatasync", after),
        ("a create, one client (its commit)", whole),
    ]
    print(f"{'us':<36}{'p50':>9}{'p99':>9}{'mean':>9}")
    for name, values in rows:
        p50, p99, mean = _quantiles(values)
        print(f"{name:<36}{p50:>9.2f}{p99:>9.2f}{mean:>9.2f}")
    checks = statistics.median(before) + statistics.median(after)
    share = checks / statistics.median(whole)
    print(f"both checks: {checks:.2f} us a commit, {share:.1%} of a lone client's create")
    return 0


if __name__ == "__main__":
    sys.exit(main())
