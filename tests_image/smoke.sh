#!/usr/bin/env bash
# Smoke test of a built petstore image: `bash tests_image/smoke.sh IMAGE`, run by .ci/image-test
# (`make image-test`), which builds the image and sets podman up for this machine. It checks what
# tests/test_container.py can't without an engine: the image starts, its HEALTHCHECK passes, the
# key is enforced, the service runs as uid 10001 with Python as PID 1, `podman stop` ends it
# cleanly within 5 s, and pets outlive the container on a named volume.
#
# Plain bash rather than pytest: every check is one podman command or one HTTP request; it runs on
# a fresh machine without the dev venv; and it stays out of the Python tooling's configuration
# (ruff, mypy's file list, pytest's testpaths) that `make test` owns.
set -euo pipefail

image=${1:?usage: smoke.sh IMAGE}
key="image-test-key"
name=petstore-smoke-$$
volume=$name-data
started=()
work=$(mktemp -d "${TMPDIR:-/tmp}/petstore-smoke.XXXXXX")

cleanup() {
    if ((${#started[@]})); then
        podman rm --force --time 0 "${started[@]}" >/dev/null 2>&1 || true
    fi
    podman volume rm --force "$volume" "$volume-any" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM # so that the EXIT trap cleans up then too

fail() {
    echo "image-test: FAIL: $*" >&2
    exit 1
}
ok() { echo "image-test: ok: $*"; }
quietly() { # runs a podman command, showing its stderr only if it fails
    "$@" 2>"$work/stderr" || {
        cat "$work/stderr" >&2
        return 1
    }
}
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

# Starts the image as container $1 with a key and its data file on the named volume, and waits
# until its own HEALTHCHECK passes. `podman healthcheck run` runs the image's check command in the
# container once; podman would schedule it with a systemd timer, and these machines have no
# systemd: that is the "unable to get systemd connection" error podman logs on run, stop and rm,
# which `quietly` hides unless the command fails.
# Port publishing works here (rootful podman, netavark): the service gets a free loopback port.
start() {
    local container=$1 deadline check
    started+=("$container")
    quietly podman run --detach --name "$container" \
        --publish 127.0.0.1::8000 --volume "$volume:/data" \
        --env PETSTORE_API_KEYS="$key" --env PETSTORE_DATA=/data/pets.jsonl \
        "$image" >/dev/null || fail "podman run $container (its error above)"
    address=$(podman port "$container" 8000)
    deadline=$(($(now_ms) + 30000))
    until check=$(podman healthcheck run "$container" 2>&1); do
        if [[ $(podman inspect --format '{{.State.Status}}' "$container") != running ]]; then
            fail "$container exited before it was healthy; its log:"$'\n'"$(podman logs "$container" 2>&1)"
        fi
        (($(now_ms) < deadline)) || fail "$container not healthy within 30 s: $check"
        sleep 0.2 # the poll's pace; the deadline decides
    done
    local health
    health=$(podman inspect --format '{{.State.Health.Status}}' "$container")
    [[ $health == healthy ]] || fail "$container: health status '$health' after a passing check"
    ok "$container healthy through its HEALTHCHECK (podman healthcheck run), at $address"
}

# request METHOD PATH [curl arguments]: sets $status, $body and $headers (lower-cased).
request() {
    status=$(curl --silent --show-error --max-time 5 --request "$1" "http://$address$2" \
        --output "$work/body" --dump-header "$work/headers" --write-out '%{http_code}' "${@:3}") ||
        fail "$1 $2: no HTTP answer from $address"
    body=$(<"$work/body")
    headers=$(tr -d '\r' <"$work/headers" | tr '[:upper:]' '[:lower:]')$'\n'
}

expect() { # what, actual, expected
    [[ $2 == "$3" ]] || fail "$1: expected '$3', got '$2'"
}

authorization="Authorization: Bearer $key"
pet='{"id":1,"name":"Rex","categoryId":1,"status":"available"}'

# Without --format docker podman drops the HEALTHCHECK: say so instead of polling for 30 s.
[[ $(podman image inspect --format '{{json .HealthCheck}}' "$image") == '{"Test":'* ]] ||
    fail "$image has no HEALTHCHECK (podman keeps it only with build --format docker)"
start "$name"

request GET /v1/pets
expect "GET /v1/pets without a key: status" "$status" 401
[[ $body == *'"code":"unauthorized"'* ]] || fail "401 body is not the unauthorized Error: $body"
[[ $headers == *$'\nwww-authenticate: bearer'* ]] || fail "401 without a Bearer challenge: $headers"
ok "401 without a key"

request POST /v1/pets --header "$authorization" --header 'Content-Type: application/json' \
    --data '{"name": "Rex", "categoryId": 1, "status": "available"}'
expect "POST /v1/pets with the key: status" "$status" 201
expect "POST /v1/pets with the key: body" "$body" "$pet"
[[ $headers == *$'\nlocation: /v1/pets/1\n'* ]] || fail "201 without Location /v1/pets/1: $headers"
request GET /v1/pets --header "$authorization"
expect "GET /v1/pets with the key: status" "$status" 200
expect "GET /v1/pets with the key: body" "$body" "[$pet]"
ok "201 and the list with the key"

# Flags after the image's name go to the service (its ENTRYPOINT): a bad one stops it, one line.
if out=$(podman run --rm "$image" --port nope 2>&1); then
    fail "podman run $image --port nope: the service started"
fi
[[ $out == *"petstore: --port: expected an integer from 0 to 65535, got 'nope'"* ]] ||
    fail "podman run $image --port nope: not the service's refusal: $out"
ok "flags after the image's name reach the service"

# An arbitrary uid in group 0 (as OpenShift runs images) can write /data on a new volume too.
quietly podman run --rm --user 123456:0 --volume "$volume-any:/data" --entrypoint python \
    "$image" -c "open('/data/pets.jsonl', 'x').close()" ||
    fail "an arbitrary uid in group 0 could not write /data (its error above)"
ok "an arbitrary uid in group 0 writes /data"

# The container's main process, seen from the host (rootful podman: same uids, same /proc).
pid=$(podman inspect --format '{{.State.Pid}}' "$name")
expect "uids (real, effective, saved, filesystem) of the container's PID 1" \
    "$(awk '/^Uid:/ { print $2, $3, $4, $5 }' "/proc/$pid/status")" "10001 10001 10001 10001"
expect "command line of the container's PID 1" "$(tr '\0' ' ' <"/proc/$pid/cmdline")" "python app.py "
ok "runs as uid 10001, python app.py as PID 1"

# podman stop sends the STOPSIGNAL (SIGTERM) and SIGKILLs after 10 s (exit status 137).
begin=$(now_ms)
quietly podman stop "$name" >/dev/null || fail "podman stop $name (its error above)"
took=$(($(now_ms) - begin))
((took < 5000)) || fail "podman stop took $took ms (5000 at most)"
expect "exit status after podman stop" "$(podman inspect --format '{{.State.ExitCode}}' "$name")" 0
ok "podman stop: exit status 0 after $took ms"

# A new container on the same named volume: the pet comes back from /data/pets.jsonl.
start "$name-again"
request GET /v1/pets --header "$authorization"
expect "GET /v1/pets in a new container on the volume: status" "$status" 200
expect "GET /v1/pets in a new container on the volume: body" "$body" "[$pet]"
ok "the pet survived the restart on the named volume"

# The data file uid 10001 made, another uid of group 0 (OpenShift's next start) may write.
quietly podman run --rm --user 123456:0 --volume "$volume:/data" --entrypoint python \
    "$image" -c "open('/data/pets.jsonl', 'r+b').close()" ||
    fail "an arbitrary uid in group 0 could not write the data file uid 10001 made (above)"
ok "the data file is writable by group 0"
