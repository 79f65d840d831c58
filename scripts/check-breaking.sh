#!/usr/bin/env bash
# Fails when proto/ breaks the contract of the last release (buf breaking, FILE rules,
# as buf.yaml sets). The last release is the newest tag vX.Y.Z reachable from HEAD; a
# clone made without tags uses the release commit that proto/LAST_RELEASE names
# (scripts/release.sh writes both).
set -euo pipefail
cd "$(dirname "$0")/.."
BUF="${BUF:-buf}"
if tag="$(git describe --tags --abbrev=0 --match 'v[0-9]*' HEAD 2>/dev/null)"; then
  against="$tag"
  ref="$(git rev-list -n 1 "$tag")"
else
  read -r against ref <proto/LAST_RELEASE
  git cat-file -e "$ref^{commit}" 2>/dev/null || {
    echo "check-breaking: release $against ($ref) is not in this clone (shallow?)" >&2
    exit 1
  }
fi
echo "check-breaking: proto/ against release $against ($ref)"
"$BUF" breaking proto --against ".git#ref=$ref,subdir=proto"
echo "check-breaking: no breaking change since $against"
