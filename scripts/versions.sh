#!/usr/bin/env bash
# One version for the server and its client packages.
#
#   scripts/versions.sh check         fails unless every package carries the server's version
#   scripts/versions.sh release X.Y.Z sets X.Y.Z everywhere, commits, tags vX.Y.Z and records
#                                     the release in proto/LAST_RELEASE (the contract that
#                                     scripts/check-breaking.sh holds later changes to)
set -euo pipefail
cd "$(dirname "$0")/.."

# The server's version: the root package's.
server_version() { sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1; }

# Every file that carries a version, with the sed expressions that read and write it.
FILES=(Cargo.toml crates/*/Cargo.toml clients/python/pyproject.toml
  clients/python/memmachine_grpc/__init__.py clients/typescript/package.json)
read_version() { # FILE
  case "$1" in
    *.toml) sed -n 's/^version = "\(.*\)"$/\1/p' "$1" | head -1 ;;
    *.py) sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$1" ;;
    *.json) sed -n 's/^  "version": "\(.*\)",$/\1/p' "$1" | head -1 ;;
  esac
}
write_version() { # FILE VERSION
  case "$1" in
    *.toml) sed -i "0,/^version = \".*\"$/s//version = \"$2\"/" "$1" ;;
    *.py) sed -i "s/^__version__ = \".*\"$/__version__ = \"$2\"/" "$1" ;;
    *.json) sed -i "0,/^  \"version\": \".*\",$/s//  \"version\": \"$2\",/" "$1" ;;
  esac
}

check() {
  local want got file status=0
  want="$(server_version)"
  for file in "${FILES[@]}"; do
    got="$(read_version "$file")"
    if [[ "$got" != "$want" ]]; then
      echo "versions: $file carries ${got:-no version}, the server $want" >&2
      status=1
    fi
  done
  ((status == 0)) && echo "versions: every package at $want"
  return "$status"
}

release() { # VERSION
  local version="$1"
  [[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "versions: X.Y.Z, not $version" >&2; exit 2; }
  [[ -z "$(git status --porcelain)" ]] || { echo "versions: commit or stash first" >&2; exit 1; }
  bash scripts/check-breaking.sh
  for file in "${FILES[@]}"; do write_version "$file" "$version"; done
  (cd clients/typescript && npm install --package-lock-only --no-audit --no-fund >/dev/null)
  cargo update --workspace --offline
  check
  git commit -qam "Release v$version"
  git tag -a "v$version" -m "v$version"
  echo "v$version $(git rev-parse HEAD)" >proto/LAST_RELEASE
  git commit -qm "proto/LAST_RELEASE: v$version" proto/LAST_RELEASE
  echo "versions: released v$version (push the tag with the branch)"
}

case "${1:-}" in
  check) check ;;
  release) release "${2:?usage: $0 release X.Y.Z}" ;;
  *) echo "usage: $0 check | release X.Y.Z" >&2; exit 2 ;;
esac
