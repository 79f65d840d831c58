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
#   scripts/container.sh smoke   runs the image with podman (runc; see below): health
#                                SERVING, uid 10001, a read-only root file system, an
#                                episode that survives a restart of the container and a
#                                new container on the same volume
#   scripts/container.sh size    prints the image's size
#
# Storage is buildah's/podman's default for root with the vfs driver (no overlay inside
# this sandbox); the build's RUN steps use chroot isolation. Needs buildah, podman,
# mmdebstrap and, for smoke, runc (Debian packages). With Docker:
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
# podman with runc (Debian's package): its default runtime here, crun, refuses this
# sandbox's hybrid cgroups ("cgroups in hybrid mode not supported"), and podman's default
# rlimits (nofile 1048576) are above the sandbox's hard limits, so they are set within
# them. The container runs as the image says (uid 10001, `serve`), with --read-only and
# /data on a host directory; the host's network, on a free loopback port.
PODMAN=(podman --storage-driver vfs --runtime runc)
SMOKE_DATA="$CACHE/data"
SMOKE_NAME=memmachine-smoke

run_flags() {
  local nofile
  nofile=$(ulimit -Hn)
  echo --ulimit "nofile=$nofile:$nofile" --ulimit nproc=16384:16384 --read-only --no-healthcheck \
    --network host -v "$SMOKE_DATA:/data" -e "MEMMACHINE_LISTEN=127.0.0.1:$PORT"
}

wait_serving() {
  local i
  for i in $(seq 1 60); do
    if "${PODMAN[@]}" exec "$SMOKE_NAME" memmachine health --addr "127.0.0.1:$PORT" 2>/dev/null; then
      return
    fi
    sleep 1
  done
  echo "the server did not answer SERVING within 60 s:" >&2
  "${PODMAN[@]}" logs "$SMOKE_NAME" >&2
  exit 1
}

cleanup_smoke() { "${PODMAN[@]}" rm -f -t 40 "$SMOKE_NAME" >/dev/null 2>&1 || true; }

smoke() {
  command -v runc >/dev/null || { echo "runc is required (apt-get install runc)" >&2; exit 1; }
  PORT="${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
  rm -rf "$SMOKE_DATA"
  mkdir -p "$SMOKE_DATA"
  chown 10001:10001 "$SMOKE_DATA"
  cleanup_smoke
  trap cleanup_smoke EXIT
  local flags
  read -ra flags <<<"$(run_flags)"
  echo "== podman run --rm memmachine keys create --org acme"
  local key
  key=$("${PODMAN[@]}" run --rm "${flags[@]}" "$IMAGE" keys create --org acme --label laptop --data-dir /data |
    tee /dev/stderr | grep -o 'mm_[A-Za-z0-9_]*' | head -n 1)
  [[ -n "$key" ]] || { echo "keys create printed no key" >&2; exit 1; }
  echo "== podman run -d (serve on 127.0.0.1:$PORT)"
  "${PODMAN[@]}" run -d --name "$SMOKE_NAME" "${flags[@]}" "$IMAGE" >/dev/null
  wait_serving
  "${PODMAN[@]}" top "$SMOKE_NAME" user huser pid args
  echo "read-only root: $("${PODMAN[@]}" inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$SMOKE_NAME")"
  "${PODMAN[@]}" exec "$SMOKE_NAME" sh -c 'id; touch /usr/local/bin/x; touch /data/x && rm /data/x && echo "/data is writable"' || true
  local client=("${PODMAN[@]}" exec -e "MEMMACHINE_API_KEY=$key" "$SMOKE_NAME" memmachine)
  "${client[@]}" projects create notes --org acme --addr "127.0.0.1:$PORT"
  "${client[@]}" add --org acme --project notes --addr "127.0.0.1:$PORT" \
    --producer laptop "The container kept this across a restart."
  echo "== podman stop (SIGTERM), podman start"
  "${PODMAN[@]}" stop -t 40 "$SMOKE_NAME" >/dev/null
  echo "exit code: $("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$SMOKE_NAME")"
  "${PODMAN[@]}" start "$SMOKE_NAME" >/dev/null
  wait_serving
  local found
  found=$("${client[@]}" search --org acme --project notes --addr "127.0.0.1:$PORT" "restart")
  echo "$found"
  grep -q 'kept this across a restart' <<<"$found" || { echo "the episode did not survive the restart" >&2; exit 1; }
  echo "== a new container on the same volume"
  cleanup_smoke
  "${PODMAN[@]}" run -d --name "$SMOKE_NAME" "${flags[@]}" "$IMAGE" >/dev/null
  wait_serving
  found=$("${client[@]}" search --org acme --project notes --addr "127.0.0.1:$PORT" "restart")
  echo "$found"
  grep -q 'kept this across a restart' <<<"$found" || { echo "the episode is not on the volume" >&2; exit 1; }
  "${PODMAN[@]}" stop -t 40 "$SMOKE_NAME" >/dev/null
  echo "smoke: ok (SERVING, uid 10001, read-only root, the episode survived a restart and a new container)"
}

case "${1:-}" in
  bases) runtime_base; builder_base ;;
  build) build ;;
  size) image_size ;;
  smoke) smoke ;;
  *) sed -n '2,/^set -e/{/^set -e/!p}' "$0" >&2; exit 2 ;;
esac
