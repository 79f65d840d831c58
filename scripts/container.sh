#!/usr/bin/env bash
# Builds and runs the container image from the Dockerfile on a machine that reaches no
# container registry: the two base images the Dockerfile takes as build arguments are made
# here from Debian's packages, then buildah runs every step of the Dockerfile itself
# (the cargo build included; it fetches crates from crates.io inside the build).
#
#   scripts/container.sh bases   makes the stand-in base images (mmdebstrap, bookworm):
#                                  localhost/memmachine-runtime-base:bookworm  minbase, no docs
#                                  localhost/memmachine-builder-base:bookworm  build-essential,
#                                    pkg-config, git, and this machine's Rust toolchain
#                                    (rustup's ~/.rustup and ~/.cargo/bin, as in rust:1.95)
#                                (skipped for a base that is already in local storage;
#                                 REBUILD_BASES=1 makes them again)
#   scripts/container.sh build   bases, then `buildah bud` of the Dockerfile with them,
#                                tagged localhost/memmachine:latest; prints the time taken
#                                and the image's size
#   scripts/container.sh smoke   runs the image (buildah run, see below): health SERVING,
#                                an episode that survives a restart of the container on a
#                                volume, uid 10001, a read-only root file system
#   scripts/container.sh size    prints the image's size
#
# Storage is buildah's/podman's default for root with the vfs driver (no overlay inside
# this sandbox); isolation is chroot (no user namespaces or runc here). With Docker:
# `docker build -t memmachine .` uses the public bases and needs none of this.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CONTAINER_CACHE:-/var/tmp/memmachine-container}"
SUITE=bookworm
RUNTIME_BASE=localhost/memmachine-runtime-base:$SUITE
BUILDER_BASE=localhost/memmachine-builder-base:$SUITE
IMAGE="${IMAGE:-localhost/memmachine:latest}"
TOOLCHAIN="${RUST_TOOLCHAIN:-stable-x86_64-unknown-linux-gnu}"
RUSTUP_DIR="${RUSTUP_HOME:-$HOME/.rustup}"
CARGO_DIR="${CARGO_HOME:-$HOME/.cargo}"
BUILDAH=(buildah --storage-driver vfs)

# As in debian:bookworm-slim: no documentation, manual pages or translations.
SLIM_DPKG=(
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/lintian/*'
  # /usr merged by the hook, not by the usrmerge package (which brings perl, 40 MB).
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
)

have_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# Imports a root file system tarball as an image; extra arguments are `buildah config` flags.
import_rootfs() {
  local tarball=$1 tag=$2
  shift 2
  local ctr
  ctr=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" add "$ctr" "$tarball" /
  "${BUILDAH[@]}" config --os linux --arch amd64 "$@" "$ctr"
  "${BUILDAH[@]}" commit --rm "$ctr" "$tag" >/dev/null
}

runtime_base() {
  if [[ -z "${REBUILD_BASES:-}" ]] && have_image "$RUNTIME_BASE"; then
    echo "== $RUNTIME_BASE is there"
    return
  fi
  echo "== $RUNTIME_BASE: mmdebstrap --variant=minbase $SUITE"
  mkdir -p "$CACHE"
  mmdebstrap --variant=minbase "${SLIM_DPKG[@]}" "$SUITE" "$CACHE/runtime.tar"
  import_rootfs "$CACHE/runtime.tar" "$RUNTIME_BASE" --cmd bash \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
}

builder_base() {
  if [[ -z "${REBUILD_BASES:-}" ]] && have_image "$BUILDER_BASE"; then
    echo "== $BUILDER_BASE is there"
    return
  fi
  local tc="$RUSTUP_DIR/toolchains/$TOOLCHAIN"
  [[ -x "$tc/bin/cargo" ]] || { echo "no Rust toolchain at $tc" >&2; exit 1; }
  echo "== $BUILDER_BASE: mmdebstrap $SUITE + build-essential + $TOOLCHAIN from $tc"
  mkdir -p "$CACHE"
  mmdebstrap --variant=minbase "${SLIM_DPKG[@]}" \
    --include=build-essential,pkg-config,ca-certificates,git,curl \
    "$SUITE" "$CACHE/builder.tar"
  # The toolchain laid out as the official rust image does (RUSTUP_HOME=/usr/local/rustup,
  # CARGO_HOME=/usr/local/cargo), without its HTML documentation.
  local stage="$CACHE/toolchain"
  rm -rf "$stage"
  mkdir -p "$stage/usr/local/rustup/toolchains" "$stage/usr/local/cargo/bin"
  tar -C "$RUSTUP_DIR/toolchains" --exclude="$TOOLCHAIN/share/doc" -cf - "$TOOLCHAIN" |
    tar -C "$stage/usr/local/rustup/toolchains" -xf -
  printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\nauto_self_update = "disable"\n' \
    "$TOOLCHAIN" >"$stage/usr/local/rustup/settings.toml"
  cp -a "$CARGO_DIR/bin/rustup" "$stage/usr/local/cargo/bin/"
  for tool in cargo rustc rustdoc cargo-clippy clippy-driver rustfmt cargo-fmt; do
    ln -s rustup "$stage/usr/local/cargo/bin/$tool"
  done
  tar -C "$stage" -cf "$CACHE/toolchain.tar" usr
  rm -rf "$stage"
  local ctr
  ctr=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" add "$ctr" "$CACHE/builder.tar" /
  "${BUILDAH[@]}" add "$ctr" "$CACHE/toolchain.tar" /
  trust_local_cas "$ctr"
  "${BUILDAH[@]}" config --os linux --arch amd64 --cmd bash \
    --env RUSTUP_HOME=/usr/local/rustup --env CARGO_HOME=/usr/local/cargo \
    --env PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    "$ctr"
  "${BUILDAH[@]}" commit --rm "$ctr" "$BUILDER_BASE" >/dev/null
  rm -f "$CACHE/builder.tar" "$CACHE/toolchain.tar"
}

# The CAs this machine adds to Debian's (/usr/local/share/ca-certificates: a TLS-inspecting
# egress proxy's, say), so cargo inside the build reaches crates.io as it does here. The
# builder base only: the runtime image gets none of them.
trust_local_cas() {
  local ctr=$1
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    "${BUILDAH[@]}" copy "$ctr" /usr/local/share/ca-certificates/ /usr/local/share/ca-certificates/
    "${BUILDAH[@]}" run --isolation chroot "$ctr" -- update-ca-certificates
  fi
}

image_size() {
  "${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep -F "${IMAGE%:*}:" || true
  # Uncompressed bytes of the layers, summed (what `podman image inspect` calls Size).
  podman --storage-driver vfs image inspect --format 'bytes: {{.Size}}' "$IMAGE"
}

build() {
  runtime_base
  builder_base
  echo "== buildah bud $IMAGE"
  local start=$SECONDS
  "${BUILDAH[@]}" bud --isolation chroot --layers --pull=never --format docker \
    --build-arg BUILDER_IMAGE="$BUILDER_BASE" \
    --build-arg RUNTIME_IMAGE="$RUNTIME_BASE" \
    -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT"
  echo "== built $IMAGE in $((SECONDS - start)) s"
  image_size
}

# --- smoke: the image run as a container ----------------------------------------------
# `podman run` is tried first and its error shown; where it cannot run (here: setrlimit
# refused inside this sandbox), buildah runs the image's own binary in a working
# container made from the image (chroot isolation, the host's network, /data on a host
# directory), as the user the image names.
SMOKE_DATA="$CACHE/data"
SMOKE_CTR=""
SERVER_PID=""

descendant_named() { # PID NAME: the first process under PID whose command is NAME
  local pid=$1 name=$2 child
  for child in $(ps -o pid= --ppid "$pid"); do
    if [[ "$(ps -o comm= -p "$child")" == "$name" ]]; then
      echo "$child"
      return
    fi
    descendant_named "$child" "$name" && return
  done
  return 1
}

in_ctr() { "${BUILDAH[@]}" run --isolation chroot --network host -v "$SMOKE_DATA:/data" "$SMOKE_CTR" -- "$@"; }

start_server() {
  in_ctr memmachine serve >"$CACHE/server.log" 2>&1 &
  SERVER_PID=$!
  local i
  for i in $(seq 1 60); do
    if in_ctr memmachine health --addr "127.0.0.1:$PORT" >/dev/null 2>&1; then
      return
    fi
    sleep 1
  done
  echo "the server did not answer SERVING within 60 s:" >&2
  cat "$CACHE/server.log" >&2
  exit 1
}

stop_server() {
  local pid
  pid=$(descendant_named "$SERVER_PID" memmachine) || { echo "no server process under $SERVER_PID" >&2; exit 1; }
  kill -TERM "$pid"
  wait "$SERVER_PID" || true
  echo "stopped: $(tail -n 1 "$CACHE/server.log")"
}

cleanup_smoke() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    local pid
    pid=$(descendant_named "$SERVER_PID" memmachine) && kill -TERM "$pid"
    wait "$SERVER_PID" 2>/dev/null || true
  fi
  [[ -z "$SMOKE_CTR" ]] || "${BUILDAH[@]}" rm "$SMOKE_CTR" >/dev/null 2>&1 || true
}

smoke() {
  PORT="${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
  echo "== podman run (tried first)"
  podman --storage-driver vfs run --rm "$IMAGE" --version 2>&1 | tail -n 3 || true
  echo "== buildah from $IMAGE (user, entrypoint and environment from the image)"
  rm -rf "$SMOKE_DATA"
  mkdir -p "$SMOKE_DATA"
  chown 10001:10001 "$SMOKE_DATA"
  trap cleanup_smoke EXIT
  SMOKE_CTR=$("${BUILDAH[@]}" from --pull=never "$IMAGE")
  "${BUILDAH[@]}" inspect --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}}' "$SMOKE_CTR"
  # The image listens on 0.0.0.0:50051; on the host's network a free loopback port.
  "${BUILDAH[@]}" config --env MEMMACHINE_LISTEN="127.0.0.1:$PORT" "$SMOKE_CTR"
  in_ctr memmachine --version
  local key
  key=$(in_ctr memmachine keys create --org acme --label smoke --data-dir /data | grep -o 'mm_[A-Za-z0-9_]*' | head -n 1)
  [[ -n "$key" ]] || { echo "keys create printed no key" >&2; exit 1; }
  echo "== serve"
  start_server
  local pid
  pid=$(descendant_named "$SERVER_PID" memmachine)
  echo "server pid $pid: uid $(ps -o uid= -p "$pid" | tr -d ' '), $(readlink "/proc/$pid/exe")"
  in_ctr memmachine health --addr "127.0.0.1:$PORT"
  local client=(env MEMMACHINE_API_KEY="$key" memmachine)
  in_ctr "${client[@]}" projects create notes --org acme --addr "127.0.0.1:$PORT"
  in_ctr "${client[@]}" add --org acme --project notes --addr "127.0.0.1:$PORT" \
    --producer smoke "The container kept this across a restart."
  echo "== restart"
  stop_server
  start_server
  in_ctr memmachine health --addr "127.0.0.1:$PORT"
  local found
  found=$(in_ctr "${client[@]}" search --org acme --project notes --addr "127.0.0.1:$PORT" "restart")
  echo "$found"
  grep -q 'kept this across a restart' <<<"$found" || { echo "the episode did not survive the restart" >&2; exit 1; }
  echo "== root file system"
  in_ctr sh -c 'id; touch /usr/local/bin/x 2>&1 || true; touch /data/x && echo "/data writable"; rm -f /data/x'
  stop_server
  echo "smoke: SERVING, the episode survived a restart, uid 10001"
}

case "${1:-}" in
  bases) runtime_base; builder_base ;;
  build) build ;;
  size) image_size ;;
  smoke) smoke ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
