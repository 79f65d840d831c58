#!/usr/bin/env bash
# Generates the protobuf-es code into $1 (default src/gen) with buf and the local
# protoc-gen-es plugin (no remote plugins). BUF overrides the buf binary.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-src/gen}"
ROOT="$(cd ../.. && pwd)"
BUF="${BUF:-}"
if [ -z "$BUF" ]; then
  for b in "$ROOT/.tools/npm/node_modules/.bin/buf" /work/main/.tools/npm/node_modules/.bin/buf; do
    if [ -x "$b" ]; then BUF="$b"; break; fi
  done
fi
[ -n "$BUF" ] || BUF="$(command -v buf || true)"
[ -x node_modules/.bin/protoc-gen-es ] || { echo "run clients/typescript/setup.sh first" >&2; exit 1; }
[ -n "$BUF" ] || { echo "buf not found: run scripts/setup-test-tools.sh (or set BUF)" >&2; exit 1; }
if [ "$OUT" = "src/gen" ]; then
  "$BUF" generate --template buf.gen.yaml
else
  # buf.gen.yaml's out is relative; write a copy of it pointing at $OUT.
  tmpl="$(mktemp --suffix=.gen.yaml)"
  sed "s#out: src/gen#out: $OUT#" buf.gen.yaml > "$tmpl"
  "$BUF" generate --template "$tmpl"
  rm -f "$tmpl"
fi
