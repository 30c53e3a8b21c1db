"""GET /metrics: names, types, labels and values after known traffic, the data file's metrics,
and --metrics off."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app import Petstore, create_app
from filestore import FileStore
from settings import Settings
from store import MemoryStore, PetStore
from tests.conftest import KEY, ServerFactory, assert_error, serving

pytestmark = pytest.mark.anyio

WILMA = {"name": "Wilma", "categoryId": 3, "status": "pending"}
ADMIN_KEY = "admin-key-0123456789"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scraped(text: str) -> tuple[dict[str, str], Samples]:
    """The exposition parsed by prometheus_client's own parser: each family's type by name,
    and every sample's value by its name and labels."""
    types, samples = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return types, samples


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


async def scrape(client: httpx.AsyncClient) -> tuple[dict[str, str], Samples]:
    """GET /metrics without a credential: 200, the client library's content type; parsed."""
    response = await client.get("/metrics", headers={"Authorization": ""})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/plain; version=1.0.0; charset=utf-8"
    return scraped(response.text)


def app_over(store: PetStore, settings: Settings | None = None) -> Petstore:
    return create_app(settings or Settings(api_keys=(KEY,)), store)


async def test_metrics_after_known_traffic(client: httpx.AsyncClient) -> None:
    """Each request is counted once under its method, route template and status; durations too."""
    # Durations by method and route, with cumulative buckets whose +Inf is the count; the store's
    # gauges. A method outside HTTP's own is `other`, like a path no route takes: no label grows
    # with the traffic.
    for _ in range(2):
        assert (await client.post("/v1/pets", json=WILMA)).status_code == 201
    assert (await client.get("/v1/pets/1")).status_code == 200
    assert (await client.get("/v1/pets/2")).status_code == 200
    assert (await client.get("/v1/pets/99")).status_code == 404
    assert (await client.get("/v1/pets/1", headers={"Authorization": ""})).status_code == 401
    assert (await client.get("/v1/pets")).status_code == 200
    assert (await client.post("/v1/pets/1")).status_code == 405
    assert (await client.request("BREW", "/v1/pets")).status_code == 405
    assert (await client.get("/v1/store/orders")).status_code == 404
    assert (await client.get("/nowhere/at/all")).status_code == 404
    types, samples = await scrape(client)
    assert {
        "petstore_http_requests": "counter",
        "petstore_http_request_duration_seconds": "histogram",
        "petstore_pets": "gauge",
        "petstore_store_writable": "gauge",
    }.items() <= types.items()
    requests = {
        tuple(sorted(dict(key[1]).items())): value
        for key, value in samples.items()
        if key[0] == "petstore_http_requests_total"
    }
    pet = "/v1/pets/{petId}"
    assert requests == {
        (("method", "POST"), ("route", "/v1/pets"), ("status", "201")): 2,
        (("method", "GET"), ("route", pet), ("status", "200")): 2,
        (("method", "GET"), ("route", pet), ("status", "404")): 1,
        (("method", "GET"), ("route", pet), ("status", "401")): 1,  # refused before routing
        (("method", "GET"), ("route", "/v1/pets"), ("status", "200")): 1,
        (("method", "POST"), ("route", pet), ("status", "405")): 1,
        (("method", "other"), ("route", "/v1/pets"), ("status", "405")): 1,
        (("method", "GET"), ("route", "other"), ("status", "404")): 2,
    }
    counts = {
        (dict(key[1])["method"], dict(key[1])["route"]): value
        for key, value in samples.items()
        if key[0] == "petstore_http_request_duration_seconds_count"
    }
    assert counts == {
        ("POST", "/v1/pets"): 2,
        ("GET", pet): 4,
        ("GET", "/v1/pets"): 1,
        ("POST", pet): 1,
        ("other", "/v1/pets"): 1,
        ("GET", "other"): 2,
    }
    get_pet = labels(method="GET", route=pet)
    buckets = sorted(
        (float(dict(key[1])["le"]), value)
        for key, value in samples.items()
        if key[0] == "petstore_http_request_duration_seconds_bucket" and get_pet < key[1]
    )
    counted = [value for _, value in buckets]
    assert counted == sorted(counted)  # cumulative
    assert buckets[-1] == (float("inf"), 4)
    assert 0 < samples["petstore_http_request_duration_seconds_sum", get_pet] < 10
    assert samples["petstore_pets", labels()] == 2
    assert samples["petstore_store_writable", labels()] == 1


async def test_a_scrape_counts_itself_for_the_next_one(client: httpx.AsyncClient) -> None:
    """/metrics answers without a credential, and the next scrape counts the one before."""
    _, first = await scrape(client)
    _, second = await scrape(client)
    key = ("petstore_http_requests_total", labels(method="GET", route="/metrics", status="200"))
    assert key not in first
    assert second[key] == 1


async def test_metrics_are_not_in_the_journal_or_the_openapi_document() -> None:
    """A scrape is not journalled; the OpenAPI document keeps its three operations, no /metrics."""
    # With the test-control plane on.
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,))
    async with serving(app_over(MemoryStore(), settings)) as http:
        await scrape(http)
        journal = await http.get(
            "/_admin/requests", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )
        document = (await http.get("/v1/openapi.json")).json()
    assert journal.json() == {"requests": [], "dropped": 0}
    assert "/metrics" not in document["paths"]


async def test_injected_faults_and_delays_are_counted() -> None:
    """An injected status is counted under its status, and an injected delay is in the duration."""
    # Like everything else. A Prefer delay of 120 ms: past the 0.1 s bucket.
    settings = Settings(api_keys=(KEY,), admin_keys=(ADMIN_KEY,))
    async with serving(app_over(MemoryStore(), settings)) as http:
        rule = {"operation": "createPet", "status": 503, "times": 1}
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        assert (await http.post("/_admin/faults", json=rule, headers=admin)).status_code == 201
        assert_error(await http.post("/v1/pets", json=WILMA), 503, "injected_fault")
        delayed = await http.get("/v1/pets", headers={"Prefer": "delay=120"})
        assert delayed.headers["preference-applied"] == "delay=120"
        _, samples = await scrape(http)
    injected = labels(method="POST", route="/v1/pets", status="503")
    assert samples["petstore_http_requests_total", injected] == 1
    listed = labels(method="GET", route="/v1/pets")
    assert samples["petstore_http_request_duration_seconds_count", listed] == 1
    assert samples["petstore_http_request_duration_seconds_sum", listed] >= 0.12
    assert samples["petstore_http_request_duration_seconds_bucket", listed | {("le", "0.1")}] == 0


@pytest.mark.parametrize("settings", [Settings(api_keys=(KEY,), metrics=False)], ids=["off"])
async def test_metrics_off_is_a_404_and_nothing_is_counted(
    app: Petstore, client: httpx.AsyncClient
) -> None:
    """--metrics off: /metrics is the unknown-path 404 and the app keeps no metrics."""
    assert app.metrics is None
    assert_error(await client.get("/metrics"), 404, "not_found")


async def test_data_file_metrics_count_fdatasyncs_and_failed_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a data file each fdatasync is timed, and a failed write or fdatasync counts an error."""
    # One fdatasync timed per create (sequential creates: one commit each); after the failures the
    # store turns unwritable.

    def failing(number: int) -> object:
        def fail(*args: object) -> None:
            raise OSError(number, os.strerror(number))

        return fail

    store = FileStore(str(tmp_path / "pets.jsonl"))
    async with serving(app_over(store)) as http:
        for _ in range(2):
            assert (await http.post("/v1/pets", json=WILMA)).status_code == 201
        _, before = await scrape(http)
        with monkeypatch.context() as patch:
            patch.setattr("filestore.os.pwrite", failing(errno.ENOSPC))
            assert (await http.post("/v1/pets", json=WILMA)).status_code == 503
        _, after_write = await scrape(http)
        with monkeypatch.context() as patch:
            patch.setattr("filestore.os.fdatasync", failing(errno.EIO))
            assert (await http.post("/v1/pets", json=WILMA)).status_code == 503
        types, after_sync = await scrape(http)
    assert types["petstore_datafile_sync_duration_seconds"] == "histogram"
    assert types["petstore_datafile_write_errors"] == "counter"
    sync_count = "petstore_datafile_sync_duration_seconds_count", labels()
    errors = "petstore_datafile_write_errors_total", labels()
    writable = "petstore_store_writable", labels()
    pets = "petstore_pets", labels()
    assert [before[key] for key in (sync_count, errors, writable, pets)] == [2, 0, 1, 2]
    assert [after_write[key] for key in (sync_count, errors, writable, pets)] == [2, 1, 1, 2]
    assert [after_sync[key] for key in (sync_count, errors, writable, pets)] == [3, 2, 0, 2]
    inf = "petstore_datafile_sync_duration_seconds_bucket", labels(le="+Inf")
    assert after_sync[inf] == 3


async def test_memory_store_has_no_data_file_metrics(client: httpx.AsyncClient) -> None:
    """In memory, no data file metric is exposed (rather than a zero that means nothing)."""
    types, _ = await scrape(client)
    assert not [name for name in types if name.startswith("petstore_datafile_")]


def test_real_process_serves_metrics_and_metrics_off_from_the_environment(
    start_server: ServerFactory,
) -> None:
    """`python app.py` serves /metrics with the store's gauges; PETSTORE_METRICS=off: a 404."""
    on = start_server()
    with on.client() as http:
        http.post("/v1/pets", json=WILMA)
        text = http.get("/metrics", headers={"Authorization": ""}).text
    _, samples = scraped(text)
    assert samples["petstore_pets", labels()] == 1
    off = start_server(env={"PETSTORE_METRICS": "off"})
    with off.client() as http:
        response = http.get("/metrics")
    assert response.status_code == 404
