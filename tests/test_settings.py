"""Settings on the real process: flags and the environment, the generated key, bad settings."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import uvicorn.config

from settings import LOG_LEVELS, SettingsError, load_settings
from tests.conftest import (
    KEY,
    ROOT,
    WRONG_KEY,
    Launcher,
    ServerFactory,
    answers,
    bearer,
    environment,
    free_port,
    wait_until,
)
from tests.test_server import finished

MISSING_KEY = {
    "code": "unauthorized",
    "message": "Missing credential: send Authorization: Bearer <API key>",
    "status": 401,
}
PLAIN_CHALLENGE = 'Bearer realm="petstore"'
REFUSED_KEY_CHALLENGE = 'Bearer realm="petstore", error="invalid_token"'
GENERATED_KEY_LINE = re.compile(
    r"petstore: no API key configured; this run accepts: Bearer (?P<key>\S+)"
)
# client "METHOD path" status duration id: `127.0.0.1 "GET /v1/pets" 200 412us 3f9a1c2e-1`
ACCESS_LINE = re.compile(r'^\S+ "[A-Z]+ /\S*" \d{3} \d+us \S+$', re.MULTILINE)


def fill(
    args: list[str], env: dict[str, str], paths: dict[str, Path]
) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment with `{name}` placeholders replaced by paths."""
    names = {name: str(path) for name, path in paths.items()}
    return [arg.format(**names) for arg in args], {k: v.format(**names) for k, v in env.items()}


def pet_body(size: int) -> bytes:
    """A valid NewPet of exactly `size` bytes."""
    frame = b'{"name":"","categoryId":1}'
    return frame[:9] + b"x" * (size - len(frame)) + frame[9:]


# --------------------------------------------------------------------------- settings


def test_port_from_the_environment(launch: Launcher) -> None:
    """PETSTORE_PORT sets the port when no --port is given."""
    port = free_port()
    server = launch(
        [sys.executable, "app.py", "--api-key", KEY], {"PETSTORE_PORT": str(port)}, port
    )
    server.wait_ready()
    assert server.stop() in (0, -15)


def test_port_flag_wins_over_the_environment(start_server: ServerFactory) -> None:
    """--port wins over PETSTORE_PORT: the service answers on the flag's port only."""
    other = free_port()
    server = start_server(env={"PETSTORE_PORT": str(other)})
    assert answers(server.base_url)
    assert not answers(f"http://127.0.0.1:{other}")


@pytest.mark.parametrize(
    ("args", "env", "host"),
    [
        pytest.param(["--host", "127.0.0.2"], {}, "127.0.0.2", id="flag"),
        pytest.param([], {"PETSTORE_HOST": "127.0.0.2"}, "127.0.0.2", id="env"),
        pytest.param(
            ["--host", "127.0.0.3"], {"PETSTORE_HOST": "127.0.0.2"}, "127.0.0.3", id="flag-wins"
        ),
    ],
)
def test_host_setting_chooses_the_listening_address(
    start_server: ServerFactory, args: list[str], env: dict[str, str], host: str
) -> None:
    """The service listens on the configured loopback address, not on the default 127.0.0.1."""
    server = start_server(*args, env=env, wait=False)
    wait_until(
        lambda: server.process.poll() is not None or answers(f"http://{host}:{server.port}"),
        f"an answer on {host}",
    )
    assert server.process.poll() is None, server.stderr
    assert not answers(server.base_url)


# Arguments, environment ({keys} and {other_keys} are key files), and each key's verdict.
KEY_CASES = [
    pytest.param(
        ["--api-key", "flag-a", "--api-key", "flag-b"],
        {},
        {"flag-a": True, "flag-b": True},
        id="flag-repeated",
    ),
    pytest.param(
        [],
        {"PETSTORE_API_KEYS": "env-a,env-b,env-c"},
        {"env-a": True, "env-b": True, "env-c": True},
        id="env-comma-separated",
    ),
    pytest.param(
        ["--api-key", "flag-a"],
        {"PETSTORE_API_KEYS": "env-a,env-b"},
        {"flag-a": True, "env-a": False, "env-b": False},
        id="flag-wins-over-env",
    ),
    pytest.param(
        ["--api-key-file", "{keys}"], {}, {"file-a": True, "file-b": True}, id="file-flag"
    ),
    pytest.param(
        [], {"PETSTORE_API_KEYS_FILE": "{keys}"}, {"file-a": True, "file-b": True}, id="file-env"
    ),
    pytest.param(
        ["--api-key-file", "{keys}"],
        {"PETSTORE_API_KEYS_FILE": "{other_keys}"},
        {"file-a": True, "file-b": True, "other-file-key": False},
        id="file-flag-wins-over-env",
    ),
    pytest.param(
        ["--api-key", "flag-a", "--api-key-file", "{keys}"],
        {},
        {"flag-a": True, "file-a": True, "file-b": True},
        id="flag-and-file",
    ),
    pytest.param(
        [],
        {"PETSTORE_API_KEYS": "env-a", "PETSTORE_API_KEYS_FILE": "{keys}"},
        {"env-a": True, "file-a": True, "file-b": True},
        id="env-and-file",
    ),
]


@pytest.mark.parametrize(("args", "env", "verdicts"), KEY_CASES)
def test_api_keys_from_flags_environment_and_files(
    start_server: ServerFactory,
    tmp_path: Path,
    args: list[str],
    env: dict[str, str],
    verdicts: dict[str, bool],
) -> None:
    """Every configured key is accepted; keys the winning setting does not name get 401."""
    keys, other_keys = tmp_path / "keys.txt", tmp_path / "other-keys.txt"
    keys.write_text("file-a\nfile-b\n")
    other_keys.write_text("other-file-key\n")
    args, env = fill(args, env, {"keys": keys, "other_keys": other_keys})
    server = start_server(*args, env=env, key=None)
    with server.client() as http:
        for key, accepted in {**verdicts, "never-configured": False}.items():
            response = http.get("/v1/pets", headers=bearer(key))
            if accepted:
                assert (key, response.status_code, response.json()) == (key, 200, [])
            else:
                assert (key, response.status_code, response.json()) == (key, 401, WRONG_KEY)
                assert response.headers["www-authenticate"] == REFUSED_KEY_CHALLENGE
    assert "petstore: no API key configured" not in server.stdout


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--max-body", "100"], {}, id="flag"),
        pytest.param([], {"PETSTORE_MAX_BODY": "100"}, id="env"),
        pytest.param(["--max-body", "100"], {"PETSTORE_MAX_BODY": "50"}, id="flag-wins"),
    ],
)
def test_max_body_is_the_configured_size(
    start_server: ServerFactory, args: list[str], env: dict[str, str]
) -> None:
    """A 100-byte body is created; 101 bytes, declared or chunked, is 413 payload_too_large."""
    server = start_server(*args, env=env)
    json_type = {"Content-Type": "application/json"}
    too_large = {
        "code": "payload_too_large",
        "message": "The body is over the limit of 100 bytes",
        "status": 413,
    }
    with server.client() as http:
        created = http.post("/v1/pets", content=pet_body(100), headers=json_type)
        assert (created.status_code, created.json()) == (
            201,
            {"id": 1, "name": "x" * 74, "categoryId": 1},
        )
        declared = http.post("/v1/pets", content=pet_body(101), headers=json_type)
        assert (declared.status_code, declared.json()) == (413, too_large)
        chunked = http.post("/v1/pets", content=iter([pet_body(101)]), headers=json_type)
        assert (chunked.status_code, chunked.json()) == (413, too_large)
        assert http.get("/v1/pets").json() == [{"id": 1, "name": "x" * 74, "categoryId": 1}]


@pytest.mark.parametrize(
    ("args", "env", "prefix"),
    [
        pytest.param(["--root-path", "/api"], {}, "/api", id="flag"),
        pytest.param([], {"PETSTORE_ROOT_PATH": "/api"}, "/api", id="env"),
        pytest.param(
            ["--root-path", "/edge"], {"PETSTORE_ROOT_PATH": "/api"}, "/edge", id="flag-wins"
        ),
    ],
)
def test_root_path_prefixes_every_link(
    start_server: ServerFactory, args: list[str], env: dict[str, str], prefix: str
) -> None:
    """Behind a proxy that strips the root path, Location and Link carry it."""
    server = start_server(*args, env=env)
    with server.client() as http:
        created = http.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
        assert (created.status_code, created.headers["location"]) == (201, f"{prefix}/v1/pets/1")
        http.post("/v1/pets", json={"name": "Tom", "categoryId": 2})
        page = http.get("/v1/pets", params={"limit": "1"})
        assert (page.status_code, page.headers["link"]) == (
            200,
            f'<{prefix}/v1/pets?limit=1&after=1>; rel="next"',
        )
        fetched = http.get("/v1/pets/1")
        assert (fetched.status_code, fetched.headers["link"]) == (
            200,
            f'<{prefix}/v1/pets>; rel="successor-version"',
        )
        document = http.get("/v1/openapi.json").json()
        assert document["servers"] == [{"url": f"{prefix}/v1"}]


@pytest.mark.parametrize(
    ("args", "env", "logged"),
    [
        pytest.param([], {}, True, id="default-info"),
        pytest.param(["--log-level", "warning"], {}, False, id="flag"),
        pytest.param([], {"PETSTORE_LOG_LEVEL": "warning"}, False, id="env"),
        pytest.param(
            ["--log-level", "info"], {"PETSTORE_LOG_LEVEL": "warning"}, True, id="flag-wins-info"
        ),
        pytest.param(
            ["--log-level", "warning"],
            {"PETSTORE_LOG_LEVEL": "debug"},
            False,
            id="flag-wins-warning",
        ),
    ],
)
def test_log_level_warning_silences_the_access_log(
    start_server: ServerFactory, args: list[str], env: dict[str, str], logged: bool
) -> None:
    """At `warning` neither access-log lines nor INFO lines are written; at `info` both are."""
    server = start_server(*args, env=env)
    with server.client() as http:
        assert http.get("/v1/pets").status_code == 200
    assert server.stop() in (0, -15)  # the access log is flushed on the way out
    assert bool(ACCESS_LINE.search(server.stdout)) is logged, server.stdout
    assert ("INFO:" in server.stderr) is logged, server.stderr


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--data", "{data}"], {}, id="flag"),
        pytest.param([], {"PETSTORE_DATA": "{data}"}, id="env"),
        pytest.param(["--data", "{data}"], {"PETSTORE_DATA": "{other}"}, id="flag-wins"),
    ],
)
def test_data_file_keeps_pets_across_a_restart(
    start_server: ServerFactory, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """Pets created with a data file come back after a restart on the same file."""
    data, other = tmp_path / "pets.jsonl", tmp_path / "other.jsonl"
    args, env = fill(args, env, {"data": data, "other": other})
    server = start_server(*args, env=env)
    with server.client() as http:
        created = http.post("/v1/pets", json={"name": "Rex", "categoryId": 1})
        assert created.status_code == 201, created.text
    assert server.stop() in (0, -15)
    assert not other.exists()
    restarted = start_server("--data", str(data))
    with restarted.client() as http:
        assert http.get("/v1/pets").json() == [{"id": 1, "name": "Rex", "categoryId": 1}]


SEED = [
    {"id": 1, "name": "Rex", "categoryId": 1, "status": "available"},
    {"id": 2, "name": "Tom", "categoryId": 2},
]


@pytest.mark.parametrize(
    ("args", "env"),
    [
        pytest.param(["--seed", "{seed}"], {}, id="flag"),
        pytest.param([], {"PETSTORE_SEED": "{seed}"}, id="env"),
        pytest.param(["--seed", "{seed}"], {"PETSTORE_SEED": "{other}"}, id="flag-wins"),
    ],
)
def test_seed_file_fills_the_empty_store(
    start_server: ServerFactory, tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """The pets of the seed file are served, and new ids follow theirs."""
    seed, other = tmp_path / "seed.json", tmp_path / "other-seed.json"
    seed.write_text(json.dumps(SEED))
    other.write_text(json.dumps([{"id": 1, "name": "Other", "categoryId": 9}]))
    args, env = fill(args, env, {"seed": seed, "other": other})
    server = start_server(*args, env=env)
    with server.client() as http:
        assert http.get("/v1/pets").json() == SEED
        created = http.post("/v1/pets", json={"name": "Kit", "categoryId": 3})
        assert (created.status_code, created.json()) == (
            201,
            {"id": 3, "name": "Kit", "categoryId": 3},
        )


# --------------------------------------------------------------------------- the generated key


def test_without_a_key_a_generated_one_is_printed_once_and_alone_accepted(
    start_server: ServerFactory,
) -> None:
    """No key configured: one random key, printed once on stdout, is the only one accepted."""
    server = start_server(key=None)
    match = GENERATED_KEY_LINE.fullmatch(server.stdout.splitlines()[0])
    assert match, server.stdout
    key = match["key"]
    assert len(key) >= 32
    with server.client() as http:
        listed = http.get("/v1/pets", headers=bearer(key))
        assert (listed.status_code, listed.json()) == (200, [])
        created = http.post("/v1/pets", json={"name": "Rex", "categoryId": 1}, headers=bearer(key))
        assert created.status_code == 201
        wrong = http.get("/v1/pets", headers=bearer(KEY))
        assert (wrong.status_code, wrong.json()) == (401, WRONG_KEY)
        assert wrong.headers["www-authenticate"] == REFUSED_KEY_CHALLENGE
        missing = http.get("/v1/pets")
        assert (missing.status_code, missing.json()) == (401, MISSING_KEY)
        assert missing.headers["www-authenticate"] == PLAIN_CHALLENGE
    assert server.stop() in (0, -15)
    assert (server.stdout + server.stderr).count(key) == 1
    assert ACCESS_LINE.search(server.stdout), server.stdout  # the access log was on

    second = start_server(key=None)
    match = GENERATED_KEY_LINE.fullmatch(second.stdout.splitlines()[0])
    assert match, second.stdout
    assert match["key"] != key


# --------------------------------------------------------------------------- bad settings

BAD_SETTINGS = [
    pytest.param(["--bogus"], {}, id="unknown-flag"),
    pytest.param(["--port"], {}, id="flag-without-value"),
    pytest.param(["--port", "abc"], {}, id="port-not-a-number"),
    pytest.param(["--port", "70000"], {}, id="port-out-of-range"),
    pytest.param([], {"PETSTORE_PORT": "x"}, id="env-port-not-a-number"),
    pytest.param(["--max-body", "0"], {}, id="max-body-zero"),
    pytest.param(["--max-body", "-5"], {}, id="max-body-negative"),
    pytest.param([], {"PETSTORE_MAX_BODY": "lots"}, id="env-max-body"),
    pytest.param(["--log-level", "loud"], {}, id="log-level"),
    pytest.param([], {"PETSTORE_LOG_LEVEL": "loud"}, id="env-log-level"),
    pytest.param(["--root-path", "api/"], {}, id="root-path"),
    pytest.param([], {"PETSTORE_ROOT_PATH": "api/"}, id="env-root-path"),
    pytest.param(["--api-key-file", "/nonexistent"], {}, id="missing-key-file"),
    pytest.param([], {"PETSTORE_API_KEYS_FILE": "/nonexistent"}, id="env-missing-key-file"),
    pytest.param(["--api-key-file", "{empty}"], {}, id="empty-key-file"),
    pytest.param(["--api-key-file", ""], {}, id="key-file-flag-empty"),
    pytest.param([], {"PETSTORE_API_KEYS_FILE": ""}, id="env-key-file-empty"),
    pytest.param(["--api-key", "has space"], {}, id="key-with-space"),
    pytest.param([], {"PETSTORE_API_KEYS": ",,"}, id="env-keys-empty"),
    pytest.param(["--client-timeout", "0"], {}, id="client-timeout-zero"),
    pytest.param(["--client-timeout", "1e-300"], {}, id="client-timeout-tiny"),
    pytest.param([], {"PETSTORE_CLIENT_TIMEOUT": "nan"}, id="env-client-timeout-nan"),
    pytest.param(["--seed", "{deep}", "--api-key", KEY], {}, id="seed-nested-too-deeply"),
    pytest.param(["--cors-origin", "http://app.example/"], {}, id="cors-origin-with-path"),
    pytest.param([], {"PETSTORE_CORS_ORIGINS": "app.example"}, id="env-cors-origin-no-scheme"),
    pytest.param(["--cors-origin", "https://*.app.example"], {}, id="cors-origin-wildcard"),
    pytest.param(["--cors-origin", "https://user@app.example"], {}, id="cors-origin-userinfo"),
    pytest.param(["--cors-origin", "https://app.example:"], {}, id="cors-origin-empty-port"),
    pytest.param(["--cors-origin", "http://localhost%20:3000"], {}, id="cors-origin-percent"),
    pytest.param(["--cors-origin", "http://localhost#:3000"], {}, id="cors-origin-hash"),
    pytest.param(["--api-key", "same-key", "--admin-key", "same-key"], {}, id="key-both-kinds"),
    pytest.param([], {"PETSTORE_ADMIN_KEYS": "bad key"}, id="env-admin-key-with-space"),
    pytest.param(["--journal-size", "-1"], {}, id="journal-size-negative"),
    pytest.param([], {"PETSTORE_JOURNAL_SIZE": "many"}, id="env-journal-size"),
    pytest.param(["--max-tenants", "0"], {}, id="max-tenants-zero"),
    pytest.param([], {"PETSTORE_TENANT_IDLE_SECONDS": "soon"}, id="env-tenant-idle-seconds"),
    pytest.param(["--log-format", "xml"], {}, id="log-format"),
    pytest.param([], {"PETSTORE_METRICS": "yes"}, id="env-metrics"),
    pytest.param(["--max-body", "9" * 5000], {}, id="max-body-5000-digits"),
    pytest.param([], {"PETSTORE_PORT": "8" * 4301}, id="env-port-4301-digits"),
    pytest.param(["--data", "{fifo}", "--api-key", KEY], {}, id="data-file-a-fifo"),
    pytest.param(["--host", ""], {}, id="host-empty"),
    pytest.param([], {"PETSTORE_HOST": ""}, id="env-host-empty"),
    pytest.param([], {"PETSTORE_DATA": ""}, id="env-data-empty"),
    pytest.param(["--seed", ""], {}, id="seed-empty"),
    pytest.param([], {"PETSTORE_DATABASE_URL": ""}, id="env-database-empty"),
    pytest.param(["--database", "postgresql://u:pw@[::1/db"], {}, id="database-bracket-open"),
    pytest.param([], {"PETSTORE_DATABASE_URL": "postgresql://u:pw@h]/db"}, id="env-database-shut"),
    pytest.param(["--database", "postgresql://u:pw@[zz]:5432/db"], {}, id="database-not-ipv6"),
    pytest.param(["--database", "postgresql://u:p[w@h:5432/db"], {}, id="database-password-["),
    pytest.param(["--database", "postgresql://u:pw@h:" + "9" * 5000], {}, id="database-port-long"),
    pytest.param(["--cors-origin", "http://a:" + "9" * 5000], {}, id="cors-origin-port-long"),
    pytest.param(["--api-kye", KEY], {}, id="mistyped-flag"),
    pytest.param(["--po", "0"], {}, id="abbreviated-flag"),
]


@pytest.mark.parametrize(("args", "env"), BAD_SETTINGS)
def test_bad_setting_stops_the_start_with_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """A bad setting: one `petstore: ` line on stderr, nothing on stdout, exit 2."""
    empty = tmp_path / "empty.keys"
    empty.write_text("")
    deep = tmp_path / "deep.json"
    deep.write_text('[{"name": "Rex", "categoryId": ' + "[" * 5000 + "]" * 5000 + "}]")
    fifo = tmp_path / "pets.fifo"
    os.mkfifo(fifo)
    args, env = fill(args, env, {"empty": empty, "deep": deep, "fifo": fifo})
    # The port comes from the environment so that a case can still override it.
    result = subprocess.run(
        [sys.executable, "app.py", *args],
        env=environment({"PETSTORE_PORT": str(free_port()), **env}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("petstore: "), result.stderr
    assert result.stdout == ""


# --------------------------------------------------------------------------- what refusals say

# Arguments, environment, and what the refusal names (None: an argument that is no flag, which
# may be a key given by mistake, so nothing of it is shown).
REFUSALS = [
    pytest.param(["--api-kye", "Secret-123"], {}, None, id="mistyped-flag"),
    pytest.param(["--api-kye=Secret-123"], {}, None, id="mistyped-flag-equals"),
    pytest.param(["--admin_key", "Secret-123"], {}, None, id="underscore-flag"),
    pytest.param(["--api-key", "k", "Secret-123"], {}, None, id="a-value-too-many"),
    pytest.param(["--api-key Secret-123"], {}, None, id="flag-and-value-in-one"),
    pytest.param(["--api-kye", "-Secret-123"], {}, None, id="value-like-a-flag"),
    pytest.param(["--bogus", "--Secret-123"], {}, None, id="two-unknown"),
    pytest.param(["--api-key-Secret-123"], {}, None, id="value-glued-to-flag"),
    pytest.param(["-hSecret-123"], {}, None, id="glued-to-help"),
    pytest.param(["--po", "Secret-123"], {}, None, id="abbreviated-flag"),
    pytest.param(
        ["--api-key", "good-key-0123456789", "--api-key", "Secret-123 x"],
        {},
        "--api-key",
        id="bad-key-flag",
    ),
    pytest.param(
        [],
        {"PETSTORE_ADMIN_KEYS": "good-key-0123456789,,Secret-123 x"},
        "PETSTORE_ADMIN_KEYS",
        id="bad-key-env",
    ),
    pytest.param(
        ["--api-key", "Secret-123", "--admin-key", "Secret-123"], {}, "admin key", id="both-kinds"
    ),
    pytest.param([], {"PETSTORE_DATA": ""}, "PETSTORE_DATA", id="env-empty"),
    pytest.param(["--host", ""], {}, "--host", id="flag-empty"),
    pytest.param([], {"PETSTORE_HOST": "[]"}, "PETSTORE_HOST", id="env-brackets-empty"),
    pytest.param(
        ["--data", "pets.jsonl"],
        {"PETSTORE_DATABASE_URL": "postgresql://u:Secret-123@db/pets"},
        "--data",
        id="data-and-database",
    ),
    pytest.param(
        ["--database", "postgresql://u:Secret-123@[::1/db"], {}, "--database", id="database-url"
    ),
]


def test_a_bad_key_in_the_key_file_is_refused_without_showing_it(tmp_path: Path) -> None:
    """A key file with a key a bearer token can't carry: the file's setting is named, no key."""
    keys = tmp_path / "keys"
    keys.write_text("file-key-0123456789\n\nSecret-123 x\n")
    env = {"PETSTORE_API_KEYS": "env-key-0123456789,env-key-9876543210"}
    with pytest.raises(SettingsError) as refusal:
        load_settings(["--api-key-file", str(keys)], env)
    assert str(refusal.value).startswith("--api-key-file: ")
    assert "Secret-123" not in str(refusal.value)


@pytest.mark.parametrize(("args", "env", "named"), REFUSALS)
def test_a_refusal_names_the_setting_and_never_its_secret_value(
    args: list[str], env: dict[str, str], named: str | None
) -> None:
    """A refused setting is named, never with its value (a mistyped flag's may be a key)."""
    with pytest.raises(SettingsError) as refusal:
        load_settings(args, env)
    message = str(refusal.value)
    assert "Secret-123" not in message
    assert "\n" not in message
    if named is not None:
        assert named in message


def test_words_of_a_setting_are_taken_in_any_case() -> None:
    """`--log-format JSON` and `--metrics OFF`, as `--log-level INFO` always was."""
    settings = load_settings(
        ["--log-format", "JSON", "--metrics", "OFF", "--log-level", "INFO"], {}
    )
    assert (settings.log_format, settings.metrics, settings.log_level) == ("json", False, "info")


@pytest.mark.parametrize(
    ("url", "environ"),
    [("postgresql://u:p%65ts@db/pets", {}), ("postgresql://u@db/pets", {"PGPASSWORD": "pets"})],
    ids=["in-the-url", "pgpassword"],
)
def test_the_database_password_is_a_secret_wherever_it_is_given(
    url: str, environ: dict[str, str]
) -> None:
    """The database's password is among the secrets, from the URL or PGPASSWORD (which the driver
    reads when the URL has none); PGPASSWORD alone, with no database, is none."""
    settings = load_settings(["--api-key", "k" * 16, "--database", url], environ)
    assert "pets" in settings.secrets
    assert load_settings(["--api-key", "k" * 16], {"PGPASSWORD": "pets"}).secrets == ("k" * 16,)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p%26ss+w%C3%A9rd-42@db/pets",
        "postgresql://u@db/pets?password=p%26ss%2Bw%C3%A9rd-42",
        "postgresql://u@db/pets?sslmode=prefer&password=x&password=p%26ss%2Bw%C3%A9rd-42",
    ],
    ids=["user-s-part", "query", "query-twice"],
)
def test_the_database_password_is_found_where_the_driver_finds_it(url: str) -> None:
    """The database password is found where the driver finds it, and is a secret."""
    # In the user's part, or else the query's `password` (its last), decoded as the driver decodes
    # each.
    settings = load_settings(["--api-key", "k" * 16, "--database", url], {})
    decoded = "p&ss+wérd-42"  # the password the URLs hold
    assert settings.database_password == decoded
    assert decoded in settings.secrets


def test_the_settings_written_out_hold_no_secret() -> None:
    """repr(settings) writes no key of either kind and no part of the database's URL."""
    # repr is what a traceback's locals, a debugger or a test's assertion show.
    settings = load_settings(
        ["--api-key", "api-key-0123456789", "--admin-key", "admin-key-0123456789"],
        {"PETSTORE_DATABASE_URL": "postgresql://u@db/pets", "PGPASSWORD": "pg-012345"},
    )
    written = repr(settings)
    assert "journal_size=1000" in written
    for secret in ("api-key-0123456789", "admin-key-0123456789", "u@db", "pg-012345"):
        assert secret not in written
    with_url_password = load_settings([], {"PETSTORE_DATABASE_URL": "postgresql://u:pw-01234@db/p"})
    assert "pw-01234" not in repr(with_url_password)


def test_the_log_levels_are_uvicorn_s() -> None:
    """`--log-level` takes exactly uvicorn's levels."""
    assert sorted(LOG_LEVELS) == sorted(uvicorn.config.LOG_LEVELS)


def test_cors_origins_are_taken_as_browsers_send_them() -> None:
    """CORS origins are taken in lower case, as browsers send them; `*` is allowed."""
    # `http://App.Example` as given matched no request and allowed nothing.
    given = "http://App.Example,https://app.example,http://h:8080,*,http://[::1]:3000"
    settings = load_settings([], {"PETSTORE_CORS_ORIGINS": given})
    assert settings.cors_origins == (
        "http://app.example",
        "https://app.example",
        "http://h:8080",
        "*",
        "http://[::1]:3000",
    )


# Each row of the settings table: flag, variable, the field, the values given to the flag and to
# the variable, and what each gives.
TABLE = [
    ("--host", "PETSTORE_HOST", "host", ("127.0.0.2", "127.0.0.3"), ("127.0.0.2", "127.0.0.3")),
    ("--port", "PETSTORE_PORT", "port", ("0", "9000"), (0, 9000)),
    ("--data", "PETSTORE_DATA", "data", ("a.jsonl", "b.jsonl"), ("a.jsonl", "b.jsonl")),
    ("--seed", "PETSTORE_SEED", "seed", ("a.json", "b.json"), ("a.json", "b.json")),
    ("--api-key", "PETSTORE_API_KEYS", "api_keys", ("k", "a,b"), (("k",), ("a", "b"))),
    ("--max-body", "PETSTORE_MAX_BODY", "max_body", ("100", "200"), (100, 200)),
    ("--root-path", "PETSTORE_ROOT_PATH", "root_path", ("/a", "/b"), ("/a", "/b")),
    ("--log-level", "PETSTORE_LOG_LEVEL", "log_level", ("debug", "error"), ("debug", "error")),
    ("--log-format", "PETSTORE_LOG_FORMAT", "log_format", ("json", "text"), ("json", "text")),
    (
        "--database",
        "PETSTORE_DATABASE_URL",
        "database",
        ("postgresql://a/db", "postgresql://b/db"),
        ("postgresql://a/db", "postgresql://b/db"),
    ),
    ("--admin-key", "PETSTORE_ADMIN_KEYS", "admin_keys", ("k", "x,y"), (("k",), ("x", "y"))),
    ("--journal-size", "PETSTORE_JOURNAL_SIZE", "journal_size", ("0", "5"), (0, 5)),
    ("--max-tenants", "PETSTORE_MAX_TENANTS", "max_tenants", ("1", "7"), (1, 7)),
    (
        "--tenant-idle-seconds",
        "PETSTORE_TENANT_IDLE_SECONDS",
        "tenant_idle_seconds",
        ("2", "0.5"),
        (2.0, 0.5),
    ),
    (
        "--cors-origin",
        "PETSTORE_CORS_ORIGINS",
        "cors_origins",
        ("*", "http://a.example,http://b.example"),
        (("*",), ("http://a.example", "http://b.example")),
    ),
    ("--metrics", "PETSTORE_METRICS", "metrics", ("off", "off"), (False, False)),
]


@pytest.mark.parametrize(
    ("flag", "variable", "field", "given", "expected"), TABLE, ids=[row[0] for row in TABLE]
)
def test_every_setting_has_its_flag_and_variable_and_the_flag_wins(
    flag: str,
    variable: str,
    field: str,
    given: tuple[str, str],
    expected: tuple[object, object],
) -> None:
    """Each row of the settings table: the flag, the variable, and the flag winning over it."""
    assert getattr(load_settings([flag, given[0]], {}), field) == expected[0]
    assert getattr(load_settings([], {variable: given[1]}), field) == expected[1]
    both = load_settings([flag, given[0]], {variable: given[1]})
    assert getattr(both, field) == expected[0]


def test_the_defaults_are_the_settings_table_s() -> None:
    """With no flag and no variable, each setting has the table's default."""
    settings = load_settings([], {})
    defaults = {
        "host": "127.0.0.1",
        "port": 8000,
        "data": None,
        "seed": None,
        "api_keys": (),
        "max_body": 1048576,
        "root_path": "",
        "log_level": "info",
        "log_format": "text",
        "database": None,
        "admin_keys": (),
        "journal_size": 1000,
        "max_tenants": 100,
        "tenant_idle_seconds": 3600.0,
        "cors_origins": (),
        "metrics": True,
    }
    assert {name: getattr(settings, name) for name in defaults} == defaults


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_refusal_quoting_a_file_shows_no_key(tmp_path: Path, log_format: str) -> None:
    """A refusal that quotes a seed's text writes a configured key there as [redacted]."""
    seed = tmp_path / "seed.json"
    seed.write_text(f'[{{"name": "Rex", "categoryId": 1, "{KEY}": 1}}]')
    result = finished(
        [sys.executable, "app.py", "--seed", str(seed), "--log-format", log_format],
        {"PETSTORE_PORT": str(free_port()), "PETSTORE_API_KEYS": KEY},
    )
    assert (result.returncode, result.stdout) == (2, "")
    [line] = result.stderr.splitlines()
    if log_format == "json":
        line = json.loads(line)["message"]
    assert "unknown field" in line
    assert "[redacted]" in line
    assert KEY not in result.stderr


def test_a_refusal_under_uvicorn_quoting_a_file_shows_no_key(
    tmp_path: Path, launch: Launcher
) -> None:
    """Under `uvicorn app:app` too, a refusal quoting a seed writes a key there as [redacted]."""
    seed = tmp_path / "seed.json"
    seed.write_text(f'[{{"name": "Rex", "categoryId": 1, "{KEY}": 1}}]')
    port = free_port()
    server = launch(
        [sys.executable, "-m", "uvicorn", "app:app", "--port", str(port)],
        {"PETSTORE_API_KEYS": KEY, "PETSTORE_SEED": str(seed)},
        port,
    )
    assert server.process.wait(30) == uvicorn.config.STARTUP_FAILURE
    assert "[redacted]" in server.stderr
    assert KEY not in server.stderr


@pytest.mark.parametrize(
    ("argv", "exit_status"),
    [
        ([sys.executable, "app.py"], 2),
        ([sys.executable, "-m", "uvicorn", "app:app"], uvicorn.config.STARTUP_FAILURE),
    ],
    ids=["app.py", "uvicorn"],
)
def test_a_setting_refused_says_so_in_json_when_json_is_asked(
    launch: Launcher, argv: list[str], exit_status: int
) -> None:
    """A setting that can't be read is refused in one JSON line when JSON logs are asked for."""
    port = free_port()
    server = launch(
        [*argv, "--port", str(port)],
        {"PETSTORE_API_KEYS": KEY, "PETSTORE_LOG_FORMAT": "json", "PETSTORE_MAX_BODY": "abc"},
        port,
    )
    assert server.process.wait(30) == exit_status
    refusals = [json.loads(line) for line in server.stderr.splitlines() if "MAX_BODY" in line]
    assert [line["level"] for line in refusals] == ["ERROR"]
    assert refusals[0]["message"].startswith("PETSTORE_MAX_BODY: expected an integer")
    assert "time" in refusals[0]
