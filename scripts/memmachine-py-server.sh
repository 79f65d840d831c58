#!/usr/bin/env bash
# MemMachine 0.4's own Python server, as the baseline for bench/rest_client_latency.py:
# installed from PyPI into a scratch directory, configured for SQLite (episodes,
# sessions, segments), its in-process USearch vector store and a local
# sentence-transformers all-MiniLM-L6-v2, and started on a loopback port. Episodic
# memory only: no language model is configured, so semantic memory and short-term
# summaries stay off (MemMachine disables them itself when they lack a model).
#
#   scripts/memmachine-py-server.sh install   venv + pinned packages (torch included: ~6 GB)
#   scripts/memmachine-py-server.sh start     a fresh store and cfg.yml, starts, waits for health, prints the URL
#   scripts/memmachine-py-server.sh stop      stops the server that start started
#   scripts/memmachine-py-server.sh bench [ARGS]   bench/rest_client_latency.py against it
#   scripts/memmachine-py-server.sh compat-install   venv + MemMachine only (no torch: ~300 MB)
#   scripts/memmachine-py-server.sh compat-start     as start, but embeddings and chat from
#       tests/compat/fake_openai.py, so semantic memory and the /config API are on: the
#       baseline of tests/compat/differential.py
#
# Environment: MEMMACHINE_PY_DIR (scratch directory, default /tmp/memmachine-py),
# MEMMACHINE_PY_PORT (default 18795), MEMMACHINE_PY_PYTHON (a Python >= 3.12; default
# the first of python3.12, python3.13, python3 that is one), MEMMACHINE_PY_MODEL (the
# model directory; default .tools/models/all-MiniLM-L6-v2, which
# scripts/setup-test-tools.sh installs).
#
# A bench helper, not part of the build or CI. Nothing of MemMachine is kept in this
# repository; it all lives under MEMMACHINE_PY_DIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${MEMMACHINE_PY_DIR:-/tmp/memmachine-py}"
PORT="${MEMMACHINE_PY_PORT:-18795}"
MODEL="${MEMMACHINE_PY_MODEL:-$ROOT/.tools/models/all-MiniLM-L6-v2}"
VENV="$DIR/venv"
RUN="$DIR/run"
PIDFILE="$RUN/server.pid"

# sentence-transformers is MemMachine's "gpu" extra (its local embedder); torch is the
# CPU/GPU build PyPI serves, pinned with it.
PACKAGES=(
  "memmachine-server==0.4.0"
  "memmachine-client==0.4.0"
  "sentence-transformers==6.2.0"
  "torch==2.15.0"
)
COMPAT_PACKAGES=("memmachine-server==0.4.0" "memmachine-client==0.4.0")
FAKE_PORT="${MEMMACHINE_PY_FAKE_PORT:-18796}"
FAKE_PIDFILE="$RUN/fake-openai.pid"

die() { echo "memmachine-py-server: $*" >&2; exit 1; }

# The first of MEMMACHINE_PY_PYTHON, python3.12, python3.13, python3 that runs and is at
# least 3.12 (a pyenv shim runs only with its version selected, e.g. PYENV_VERSION).
python_bin() {
  local py
  for py in ${MEMMACHINE_PY_PYTHON:-} python3.12 python3.13 python3; do
    if "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$py"
      return
    fi
  done
  die "no Python >= 3.12 runs here (memmachine-server needs it); set MEMMACHINE_PY_PYTHON (with pyenv: PYENV_VERSION=3.12.1)"
}

# install [PACKAGE...]: the pinned packages (default: all of PACKAGES); a set already
# installed, or a superset of it, is kept.
install() {
  local stamp="$VENV/.memmachine-py-packages" want packages=("$@")
  [[ ${#packages[@]} -gt 0 ]] || packages=("${PACKAGES[@]}")
  want="$(printf '%s\n' "${packages[@]}")"
  if [[ -x "$VENV/bin/memmachine-server" && -f "$stamp" ]] \
    && [[ -z "$(comm -23 <(sort <<<"$want") <(sort "$stamp"))" ]]; then
    echo "memmachine-py-server: already installed ($VENV)"
    return
  fi
  local py
  py="$(python_bin)"
  mkdir -p "$DIR"
  [[ -x "$VENV/bin/python" ]] || "$py" -m venv "$VENV"
  echo "memmachine-py-server: installing ${packages[*]} into $VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet "${packages[@]}"
  printf '%s\n' "$want" >"$stamp"
  echo "memmachine-py-server: installed ($VENV)"
}

# The configuration MemMachine's own wizard (memmachine-configure) writes for SQLite with
# the sqlite_vector_store, except: a sentence-transformer embedder instead of an OpenAI
# one, no language model, and BM25's "simple" tokenizer, because the default one needs
# NLTK data that NLTK downloads from outside the package registries.
# `write_config compat`: an OpenAI-compatible embedder and chat model served by
# tests/compat/fake_openai.py instead, so that MemMachine turns on semantic memory and
# short-term summaries (it disables them without a model).
write_config() {
  local embedder models memory
  if [[ "${1:-}" == compat ]]; then
    embedder=fake_embedder
    models="
  embedders:
    fake_embedder:
      provider: openai
      config:
        model: fake-embed
        api_key: fake
        base_url: http://127.0.0.1:$FAKE_PORT/v1
        dimensions: 64
  language_models:
    fake_llm:
      provider: openai-chat-completions
      config:
        model: fake-chat
        api_key: fake
        base_url: http://127.0.0.1:$FAKE_PORT/v1"
    memory="
  short_term_memory:
    llm_model: fake_llm
    message_capacity: 64000
semantic_memory:
  enabled: true
  storage_backend: vector_store
  feature_store: sqlite_db
  vector_collection: vectors
  config_database: sqlite_db
  llm_model: fake_llm
  embedding_model: fake_embedder"
  else
    embedder=minilm
    models="
  embedders:
    minilm:
      provider: sentence-transformer
      config:
        model: $MODEL
  language_models: {}"
    memory=""
  fi
  mkdir -p "$RUN"
  cat >"$RUN/cfg.yml" <<EOF
episodic_memory:
  long_term_memory:
    backend: event
    embedder: $embedder
    reranker: rrf
    segment_store: sqlite_db
    vector_store: vectors$memory
episode_store:
  database: sqlite_db
session_manager:
  database: sqlite_db
logging:
  level: WARNING
  path: $RUN/MemMachine.log
server:
  host: 127.0.0.1
  port: $PORT
resources:
  databases:
    sqlite_db:
      provider: sqlite
      config:
        path: $RUN/memmachine.db
    vectors:
      provider: sqlite_vector_store
      config:
        path: $RUN/memmachine_vectors.db
        index_directory: $RUN/memmachine_vector_indexes$models
  rerankers:
    bm25:
      provider: bm25
      config:
        tokenizer: simple
    identity:
      provider: identity
      config: {}
    rrf:
      provider: rrf-hybrid
      config:
        reranker_ids: [bm25, identity]
EOF
}

running_pid() {
  [[ -f "$PIDFILE" ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null && cat "$PIDFILE"
}

# start [compat]
start() {
  local mode="${1:-}" extra=()
  [[ -x "$VENV/bin/memmachine-server" ]] || die "not installed: run '$0 install' first"
  if [[ "$mode" != compat ]]; then
    [[ -f "$MODEL/config.json" ]] || die "no model at $MODEL: run scripts/setup-test-tools.sh or set MEMMACHINE_PY_MODEL"
  fi
  if pid="$(running_pid)"; then
    echo "memmachine-py-server: already running (pid $pid)" >&2
    echo "http://127.0.0.1:$PORT"
    return
  fi
  # Every start begins with an empty store, so runs do not measure each other's data.
  rm -rf "$RUN"
  if [[ "$mode" == compat ]]; then
    write_config compat
    "$VENV/bin/python" "$ROOT/tests/compat/fake_openai.py" "$FAKE_PORT" >"$RUN/fake-openai.out" 2>&1 </dev/null &
    echo $! >"$FAKE_PIDFILE"
    extra=(MEMMACHINE_CONFIG_API=1)
  else
    write_config
  fi
  # Something else on the port would answer the health check (and the bench) instead.
  if port_answers; then
    die "127.0.0.1:$PORT already answers; set MEMMACHINE_PY_PORT"
  fi
  # Offline: the model is a local directory; nothing may be fetched from a model hub.
  # exec, so that the recorded pid is the server's own.
  (cd "$RUN" && exec env "${extra[@]}" MEMORY_CONFIG="$RUN/cfg.yml" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    "$VENV/bin/memmachine-server" >"$RUN/server.out" 2>&1 </dev/null) &
  echo $! >"$PIDFILE"
  local i
  for i in $(seq 1 120); do
    running_pid >/dev/null || { tail -20 "$RUN/server.out" >&2; die "the server exited"; }
    if port_answers; then
      echo "memmachine-py-server: healthy after ${i}s (pid $(cat "$PIDFILE"), log $RUN/server.out)" >&2
      echo "http://127.0.0.1:$PORT"
      return
    fi
    sleep 1
  done
  tail -20 "$RUN/server.out" >&2
  die "not healthy after 120s"
}

# True when a MemMachine 0.4.0 answers /api/v2/health on the port.
port_answers() {
  "$VENV/bin/python" - "$PORT" <<'PY' 2>/dev/null
import json, sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v2/health", timeout=2) as r:
    sys.exit(json.load(r).get("version") != "0.4.0")
PY
}

stop() {
  if pid="$(running_pid)"; then
    kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    echo "memmachine-py-server: stopped (pid $pid)"
  else
    echo "memmachine-py-server: not running"
  fi
  rm -f "$PIDFILE"
  if [[ -f "$FAKE_PIDFILE" ]]; then
    kill "$(cat "$FAKE_PIDFILE")" 2>/dev/null || true
    rm -f "$FAKE_PIDFILE"
  fi
}

case "${1:-}" in
  install) install ;;
  compat-install) install "${COMPAT_PACKAGES[@]}" ;;
  start) start ;;
  compat-start) start compat ;;
  stop) stop ;;
  bench)
    shift
    running_pid >/dev/null || die "not running: '$0 start' first"
    "$VENV/bin/python" "$ROOT/bench/rest_client_latency.py" \
      --base-url "http://127.0.0.1:$PORT" --label "memmachine-server 0.4.0" "$@"
    ;;
  *) die "usage: $0 install|compat-install|start|compat-start|stop|bench [rest_client_latency.py args]" ;;
esac
