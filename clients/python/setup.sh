#!/usr/bin/env bash
# Creates .tools/pyclient-venv (repository root) with the pinned tools that generate,
# type-check and test clients/python, and the package installed editable. Idempotent:
# nothing is done when the venv already holds exactly these pins.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VENV="$ROOT/.tools/pyclient-venv"
PY="$VENV/bin/python"
STAMP="$VENV/.memmachine-requirements"

# The runtime pins match scripts/setup-test-tools.sh.
PACKAGES=(
  "grpcio==1.85.3"
  "grpcio-tools==1.85.1"
  "grpcio-status==1.85.3"
  "googleapis-common-protos==1.76.0"
  "protobuf==7.36.2"
  "mypy-protobuf==5.1.0"
  "mypy==2.4.1"
  "types-grpcio==1.85.0.20261028"
  "types-protobuf==7.35.1.20261122"
  "pytest==9.2.0"
  "pytest-asyncio==1.5.0"
  "pytest-timeout==2.4.0"
  "langchain-core==1.6.13"
)
WANT="$(printf '%s\n' "${PACKAGES[@]}")"

if [[ -x "$PY" ]] && [[ -f "$STAMP" ]] && [[ "$(cat "$STAMP")" == "$WANT" ]] \
  && "$PY" -c 'import memmachine_grpc, grpc_tools.protoc, mypy, pytest, langchain_core' 2>/dev/null; then
  echo "pyclient setup: already installed ($VENV)"
  exit 0
fi
command -v python3 >/dev/null || { echo "pyclient setup: python3 is required" >&2; exit 1; }
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "pyclient setup: Python >= 3.10 is required" >&2; exit 1; }
if ! "$PY" -c 'import sys' 2>/dev/null; then
  echo "pyclient setup: creating $VENV"
  mkdir -p "$ROOT/.tools"
  python3 -m venv --clear "$VENV"
fi
echo "pyclient setup: installing ${PACKAGES[*]}"
"$PY" -m pip install --disable-pip-version-check --quiet "${PACKAGES[@]}"
"$PY" -m pip install --disable-pip-version-check --quiet --no-deps -e "$HERE"
"$PY" -c 'import memmachine_grpc; print("pyclient setup: memmachine_grpc", memmachine_grpc.__version__, "installed")'
printf '%s\n' "$WANT" >"$STAMP"
