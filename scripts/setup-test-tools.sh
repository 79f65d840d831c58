#!/usr/bin/env bash
# Installs the external clients that tests/external_clients.rs drives, under .tools/
# (gitignored) at the repository root. Needs no root and is idempotent: a tool that is
# already installed at the pinned version is left alone.
#
#   .tools/npm    buf (npm package @bufbuild/buf), for `buf curl` over server reflection
#   .tools/venv   Python with grpcio, grpcio-tools (protoc) and grpcio-status
#                 (google.rpc protos), for tests/external/python_client.py
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"

BUF_VERSION="1.75.0"
PY_PACKAGES=(
  "grpcio==1.85.3"
  "grpcio-tools==1.85.1"
  "grpcio-status==1.85.3"
  "googleapis-common-protos==1.76.0"
  "protobuf==7.36.2"
)

mkdir -p "$TOOLS"

# --- buf ---------------------------------------------------------------------------
BUF="$TOOLS/npm/node_modules/.bin/buf"
if [[ -x "$BUF" ]] && [[ "$("$BUF" --version 2>/dev/null)" == "$BUF_VERSION" ]]; then
  echo "setup-test-tools: buf $BUF_VERSION already installed ($BUF)"
else
  command -v npm >/dev/null || { echo "setup-test-tools: npm is required to install buf" >&2; exit 1; }
  echo "setup-test-tools: installing @bufbuild/buf@$BUF_VERSION into $TOOLS/npm"
  mkdir -p "$TOOLS/npm"
  npm install --prefix "$TOOLS/npm" --no-audit --no-fund --no-save "@bufbuild/buf@$BUF_VERSION"
  got="$("$BUF" --version)"
  [[ "$got" == "$BUF_VERSION" ]] || { echo "setup-test-tools: buf reports $got, wanted $BUF_VERSION" >&2; exit 1; }
  echo "setup-test-tools: buf $got installed"
fi

# --- Python venv -------------------------------------------------------------------
VENV="$TOOLS/venv"
PY="$VENV/bin/python"
STAMP="$VENV/.memmachine-requirements"
WANT="$(printf '%s\n' "${PY_PACKAGES[@]}")"
if [[ -x "$PY" ]] && [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$WANT" ]] \
  && "$PY" -c 'import grpc, grpc_tools.protoc, grpc_status, google.rpc.error_details_pb2' 2>/dev/null; then
  echo "setup-test-tools: python venv already installed ($VENV)"
else
  command -v python3 >/dev/null || { echo "setup-test-tools: python3 is required" >&2; exit 1; }
  if ! "$PY" -c 'import sys' 2>/dev/null; then
    # Missing, or its interpreter is gone: (re)create it.
    echo "setup-test-tools: creating python venv $VENV"
    python3 -m venv --clear "$VENV"
  fi
  echo "setup-test-tools: installing ${PY_PACKAGES[*]} into $VENV"
  "$PY" -m pip install --disable-pip-version-check --quiet "${PY_PACKAGES[@]}"
  "$PY" -c 'import grpc, grpc_tools.protoc, grpc_status, google.rpc.error_details_pb2; print("setup-test-tools: grpcio", grpc.__version__, "installed")'
  printf '%s\n' "$WANT" >"$STAMP"
fi

echo "setup-test-tools: done"
