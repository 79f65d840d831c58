#!/usr/bin/env bash
# CI for the TypeScript client: generated code up to date, tsc --strict, then the tests
# against the real server (MEMMACHINE_BIN, default <repo>/target/debug/memmachine).
set -euo pipefail
cd "$(dirname "$0")"
bash setup.sh >/dev/null
echo "== check-generated"
bash scripts/check-generated.sh
echo "== tsc --strict (src, test, bench)"
rm -rf dist
npx tsc -p tsconfig.json
echo "tsc: ok"
echo "== tests"
# The whole run is bounded; each server a test starts dies with it (process groups).
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
timeout --kill-after=10 "${TS_TEST_TIMEOUT:-600}" \
  node --test --test-concurrency=1 --test-timeout=120000 --test-reporter=spec dist/test/*.test.js 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
count() { grep -E "^ℹ $1 " "$log" | tail -1 | awk '{print $3}'; }
echo "typescript client: $(count tests) tests, $(count pass) passed, $(count fail) failed, $(count skipped) skipped, exit $status"
exit "$status"
