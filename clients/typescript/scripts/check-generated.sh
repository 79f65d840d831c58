#!/usr/bin/env bash
# Regenerates into a temp dir and fails when src/gen differs from it.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
bash scripts/generate.sh "$tmp/gen"
if ! diff -r "$tmp/gen" src/gen; then
  echo "src/gen is stale: run 'npm run generate' in clients/typescript and commit" >&2
  exit 1
fi
echo "generated code up to date ($(find src/gen -name '*.ts' | wc -l) files)"
