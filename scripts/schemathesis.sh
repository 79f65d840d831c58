#!/usr/bin/env bash
# Runs schemathesis (PyPI) against the REST gateway's OpenAPI document: starts
# `memmachine serve` with the gateway on a temporary data directory, tests every
# operation with generated (valid and invalid) bodies, stops the server, and exits
# non-zero when a check fails.
#
#   scripts/schemathesis.sh                      # no server error (5xx) on any input
#   CHECKS=all scripts/schemathesis.sh           # every check, schema conformance too
#   MAX_EXAMPLES=200 scripts/schemathesis.sh -- --seed 1   # more cases; extra st options
#
# MEMMACHINE_BIN names a built binary (default: target/debug/memmachine, built if
# missing); schemathesis is installed with pip when `st` is not on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."

checks="${CHECKS:-not_a_server_error}"
max_examples="${MAX_EXAMPLES:-50}"
[[ "${1:-}" == "--" ]] && shift

bin="${MEMMACHINE_BIN:-target/debug/memmachine}"
if [[ ! -x "$bin" ]]; then
  cargo build --locked --bin memmachine
fi
if ! command -v st >/dev/null; then
  python3 -m pip install --quiet 'schemathesis>=4,<5'
fi

work="$(mktemp -d)"
log="$work/server.log"
NO_COLOR=1 RUST_LOG=info "$bin" serve --listen 127.0.0.1:0 --rest-listen 127.0.0.1:0 \
  --data-dir "$work/data" --embedder hash >"$log" 2>&1 &
server=$!
stop() {
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  rm -rf "$work"
}
trap stop EXIT

addr=""
for _ in $(seq 300); do
  addr="$(sed -n 's/.*REST gateway listening.*addr=\([0-9.:]*\).*/\1/p' "$log" | head -n 1)"
  [[ -n "$addr" ]] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; echo "schemathesis.sh: the server exited" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$addr" ]] || { cat "$log" >&2; echo "schemathesis.sh: no REST address logged" >&2; exit 1; }
# Memory routes answer 503 until the domain is ready; wait for it.
for _ in $(seq 300); do
  status="$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'content-type: application/json' -d '{}' "http://$addr/api/v2/projects/list" || true)"
  [[ "$status" == "200" ]] && break
  sleep 0.1
done

echo "schemathesis.sh: http://$addr/api/v2/openapi.json, checks $checks, $max_examples examples"
status=0
st run "http://$addr/api/v2/openapi.json" \
  --checks "$checks" \
  --max-examples "$max_examples" \
  --workers 2 \
  --no-color \
  --generation-database none \
  "$@" || status=$?
if grep -q 'panicked' "$log"; then
  grep -A5 'panicked' "$log" >&2
  echo "schemathesis.sh: the server panicked" >&2
  status=1
fi
exit "$status"
