#!/usr/bin/env bash
# The crash loop (tests/it/crash_loop.rs, issue 16 item 1) at full length: the release server
# SIGKILLed 20 times under mixed load (MEMMACHINE_CRASH_KILLS, default 20 here), first on
# SQLite, then on PostgreSQL (started as scripts/test.sh does, and stopped again if this
# script started it). Prints each round's counts. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

export MEMMACHINE_CRASH_KILLS="${MEMMACHINE_CRASH_KILLS:-20}"

run() {
  local backend="$1" started=$SECONDS
  shift
  cargo test --release --locked --test it "$@" -- crash_loop:: --nocapture
  echo "crash-loop.sh: $backend: $MEMMACHINE_CRASH_KILLS kills passed in $((SECONDS - started)) s" >&2
}

echo "crash-loop.sh: $MEMMACHINE_CRASH_KILLS kills on SQLite" >&2
unset MEMMACHINE_TEST_BACKEND
run SQLite "$@"

if url="$(bash scripts/postgres.sh url 2>/dev/null)"; then
  echo "crash-loop.sh: PostgreSQL already running at $url" >&2
elif url="$(bash scripts/postgres.sh start)"; then
  trap 'bash scripts/postgres.sh stop' EXIT
  echo "crash-loop.sh: PostgreSQL at $url" >&2
else
  echo "crash-loop.sh: PostgreSQL did not start" >&2
  exit 1
fi
export MEMMACHINE_TEST_POSTGRES="$url"
export MEMMACHINE_TEST_BACKEND=postgres
echo "crash-loop.sh: $MEMMACHINE_CRASH_KILLS kills on PostgreSQL" >&2
run PostgreSQL "$@"
