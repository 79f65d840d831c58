#!/usr/bin/env bash
# Installs the TypeScript client's packages exactly as locked (npm ci); does nothing when
# node_modules was installed from this very package-lock.json.
set -euo pipefail
cd "$(dirname "$0")"
stamp=node_modules/.memmachine-lock.sha256
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "clients/typescript: node_modules up to date"
  exit 0
fi
npm ci --no-audit --no-fund
echo "$want" > "$stamp"
