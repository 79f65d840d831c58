#!/usr/bin/env bash
# Checks clients/python: the generated code is current, mypy --strict passes, and the
# tests pass against the real server (MEMMACHINE_BIN, default target/debug/memmachine).
# Needs clients/python/setup.sh first.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PY="$ROOT/.tools/pyclient-venv/bin/python"
export MEMMACHINE_BIN="${MEMMACHINE_BIN:-$ROOT/target/debug/memmachine}"

[[ -x "$PY" ]] || { echo "pyclient test: run clients/python/setup.sh first" >&2; exit 1; }
[[ -x "$MEMMACHINE_BIN" ]] || { echo "pyclient test: no server binary at $MEMMACHINE_BIN" >&2; exit 1; }

cd "$HERE"
PYTHON="$PY" bash "$HERE/generate.sh" --check
"$PY" -m mypy --strict memmachine_grpc tests
# A global bound per test; the session is bounded by CI's own timeout.
"$PY" -m pytest -q -p no:cacheprovider --timeout 120 tests "$@"
