# The two bases are build arguments: the public images by default, local stand-ins where
# no registry can be reached (scripts/container.sh build makes them from Debian packages).
ARG BUILDER_IMAGE=rust:1.95-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# Build stage: compiles the release binary (protoc comes vendored through
# crates/proto/build.rs).
# Everything the workspace needs to resolve and compile: every member crate, the protos
# crates/proto/build.rs compiles, and the console files src/rest/console.rs includes.
# tests/it/container_context.rs checks this list against the sources.
FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY proto ./proto
COPY crates ./crates
COPY ui ./ui
COPY src ./src
# No debug info and no symbols in the shipped binary (the release profile keeps line
# tables for profiling on a workstation): a fraction of the size.
ENV CARGO_PROFILE_RELEASE_DEBUG=0 \
    CARGO_PROFILE_RELEASE_STRIP=symbols
# The crates and the target directory are cache mounts (BuildKit, buildah): a rebuild
# after a source change compiles the workspace only, and neither lands in a layer (the
# target directory is gigabytes). The binary is copied out of the cache.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin memmachine \
    && cp target/release/memmachine /usr/local/bin/memmachine

# Runtime stage: a small image running as a non-root user, data on a volume.
FROM ${RUNTIME_IMAGE}
RUN useradd --system --uid 10001 --user-group --home-dir /data memmachine \
    && mkdir -p /data && chown memmachine:memmachine /data
COPY --from=build /usr/local/bin/memmachine /usr/local/bin/memmachine
USER 10001:10001
ENV MEMMACHINE_DATA_DIR=/data \
    MEMMACHINE_LISTEN=0.0.0.0:50051
# A container listening on 0.0.0.0 requires API keys (`memmachine keys create ...`),
# or an explicit MEMMACHINE_INSECURE_LISTEN=true.
ENV MEMMACHINE_AUTH=true
VOLUME ["/data"]
EXPOSE 50051
# Exit 0 only while the server answers SERVING (start-period covers loading a model).
HEALTHCHECK --interval=10s --timeout=6s --start-period=60s --retries=3 \
    CMD ["/usr/local/bin/memmachine", "health", "--addr", "127.0.0.1:50051"]
ENTRYPOINT ["/usr/local/bin/memmachine"]
CMD ["serve"]
