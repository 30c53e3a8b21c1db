"""Metrics: plain counts the requests and the writer thread keep, read into Prometheus at scrape."""

from __future__ import annotations

import asyncio
import bisect
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Final, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector
from starlette.types import Scope

from store import PetStore

__all__ = ["CONTENT_TYPE_LATEST", "OTHER", "Histogram", "Metrics", "RequestCounts"]

# Upper bounds (seconds) of the duration buckets, requests and fdatasyncs alike: a request
# served from memory takes well under a millisecond, an fdatasync one to tens.
BOUNDS: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# The label value of a path no route takes, and of a method outside HTTP's own: a client can't
# make a label grow (httptools knows a fixed list of methods, h11 takes any token).
OTHER: Final = "other"
DROPPED: Final = "dropped"  # the status label of a request no answer reached (routing.Unanswered)
_METHODS: Final = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)


class Histogram:
    """Observations counted into the fixed BOUNDS buckets (plain ints) and summed.

    One thread writes it; a scrape reads it from another as it is (the counts are copied in
    one go, so the buckets agree with each other, if not always with the sum).
    """

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS) + 1)  # the last one: above every bound
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BOUNDS, seconds)] += 1  # le: a bound holds its own value
        self.total += seconds

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative counts by upper bound, "+Inf" last: what HistogramMetricFamily takes."""
        counts, running, buckets = list(self.counts), 0, []
        for bound, count in zip((*map(str, BOUNDS), "+Inf"), counts, strict=True):
            running += count
            buckets.append((bound, float(running)))
        return buckets


# BOUNDS in nanoseconds: requests are timed in them, and ints compare cheaper than floats.
_BOUNDS_NS: Final = tuple(round(bound * 1e9) for bound in BOUNDS)
# How often the requests' durations are folded into the counts (the lifespan's fold_every).
# Often, so that each fold is short: 15,000 durations (half a second at 30,000 requests a
# second) took 2.5 ms to fold, holding every request waiting behind it; a tenth of that is
# about as long as one chunk of the access log's lines.
FOLD_EVERY: Final = 0.05


class RequestCounts:
    """Requests by method, route template and status, with their durations: one plain list of
    ints a (method, route, status), [requests, nanoseconds summed, a count a bucket...]. No
    lock: the event loop's thread does the noting, the folding and the scrape.

    A request costs one dict lookup and one list append: the AccessLog layer, which has the
    method, status and duration at hand, appends the duration to `pending` under (method,
    template, status), and `fold` turns those lists into the counts (a sort and a bisect a
    bucket per list, not per request), every 50 ms (the lifespan) and first thing in
    every scrape, so a scrape sees every request that ended before it. Counting each request
    into the lists of ints as it ended cost 4.4k instructions a getPet (2 %); this, 1.8k,
    folding included (README, Metrics and logs).

    A request that reached the router carries its route in the scope (set by the router, or,
    for a 401 under /v1, by IndexedRouter.route_headers); `route_of` names the template of
    one that did not (a preflight Cors answered, a 401 under /_admin, a path no route takes),
    None when no route takes its path: then the label is OTHER. The server's own 400s are
    OTHER without asking (AccessLog.note_refusal).
    """

    def __init__(self, route_of: Callable[[Scope], str | None]) -> None:
        self.route_of = route_of
        self.by_key: dict[tuple[str, str, int | str], list[int]] = {}
        # The durations (ns) of the requests since the last fold, by (method as sent, route
        # template, status; None: dropped, no answer), as AccessLog notes them.
        self.pending: defaultdict[tuple[str, str, int | None], list[int]] = defaultdict(list)

    def unrouted(self, scope: Scope) -> str:
        """The route label of a request refused before routing: the template of the route that
        would have taken it, else OTHER. (A routed one's is the path of its scope["route"].)"""
        return self.route_of(scope) or OTHER

    async def fold_every(self, seconds: float) -> None:
        """Fold, every `seconds`, until cancelled (the lifespan's task)."""
        while True:
            await asyncio.sleep(seconds)
            self.fold()

    def fold(self) -> None:
        """Add the pending durations into the counts (the scrape calls it first)."""
        pending, self.pending = self.pending, defaultdict(list)
        for (method, template, status), durations in pending.items():
            # None: no answer (a fault's drop, a client gone mid-body); counted as such
            key = (method if method in _METHODS else OTHER, template, status or DROPPED)
            counts = self.by_key.get(key)
            if counts is None:
                counts = self.by_key[key] = [0] * (3 + len(BOUNDS))
            durations.sort()
            counts[0] += len(durations)
            counts[1] += sum(durations)
            below = 0  # durations up to the bound before; le: a bound holds its own value
            for bucket, bound in enumerate(_BOUNDS_NS, start=2):
                up_to = bisect.bisect_right(durations, bound)
                counts[bucket] += up_to - below
                below = up_to
            counts[-1] += len(durations) - below

    def requests(self) -> Iterator[tuple[tuple[str, str, str], int]]:
        """(method, route, status) and how many requests."""
        self.fold()
        for (method, route, status), counts in list(self.by_key.items()):
            yield (method, route, str(status)), counts[0]

    def durations(self) -> dict[tuple[str, str], Histogram]:
        """A histogram by method and route, the statuses added up."""
        self.fold()
        histograms: dict[tuple[str, str], Histogram] = {}
        for (method, route, _), counts in list(self.by_key.items()):
            histogram = histograms.setdefault((method, route), Histogram())
            histogram.total += counts[1] / 1e9
            for bucket, count in enumerate(counts[2:]):
                histogram.counts[bucket] += count
        return histograms


class DataFileCounts(Protocol):
    """What a store that writes a file counts for the metrics (datafile.FileStore)."""

    sync_durations: Histogram
    write_errors: int


class Metrics:
    """The collector of the service's metrics, on a registry of its own (with the process's
    CPU, memory and file descriptors): everything is read when a scrape asks."""

    def __init__(
        self, requests: RequestCounts, store: PetStore, data_file: DataFileCounts | None
    ) -> None:
        self.requests = requests
        self.store = store
        self.data_file = data_file
        self.registry = CollectorRegistry()
        self.registry.register(self)
        ProcessCollector(registry=self.registry)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every metric, as GET /metrics serves it."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "petstore_http_requests",
            "HTTP requests answered, by method, route template and status.",
            labels=("method", "route", "status"),
        )
        for labels, count in self.requests.requests():
            requests.add_metric(labels, count)
        yield requests
        durations = HistogramMetricFamily(
            "petstore_http_request_duration_seconds",
            "Time from a request's arrival at the service to its last byte sent.",
            labels=("method", "route"),
        )
        for (method, route), histogram in self.requests.durations().items():
            durations.add_metric((method, route), histogram.buckets(), histogram.total)
        yield durations
        yield GaugeMetricFamily("petstore_pets", "Pets in the store.", self.store.count)
        yield GaugeMetricFamily(
            "petstore_store_writable",
            "1 while the store takes creates, 0 while it can't (a failed fdatasync, no database).",
            0 if self.store.unwritable else 1,
        )
        if self.data_file is not None:
            syncs = self.data_file.sync_durations
            yield HistogramMetricFamily(
                "petstore_datafile_sync_duration_seconds",
                "Time each fdatasync of the data file took (one a group commit).",
                syncs.buckets(),
                syncs.total,
            )
            yield CounterMetricFamily(
                "petstore_datafile_write_errors",
                "Writes or fdatasyncs of the data file that failed.",
                self.data_file.write_errors,
            )
