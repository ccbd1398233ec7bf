# syntax=docker/dockerfile:1
# The memex image: `memex serve` as a non-root user, the stripped release binary, and the
# embedding model (hash-checked) with its distilled static table.
#   docker build -t memex:dev .
#   docker run --rm -p 50051:50051 -e MEMEX_DATABASE__URL=postgres://… memex:dev
# The builder stage runs scripts/build-image-rootfs.sh, the same script that
# services/memex/tests/image.rs runs (no Docker engine is needed to test what it lays out).
# Health: gRPC health on :50051 (`""` = ready, `liveness` = alive); Kubernetes probes it with its
# native `grpc:` probes (deploy/), so the image carries no probe binary.

FROM rust:1.95-bookworm AS builder
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-pip binutils \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    bash scripts/build-image-rootfs.sh /rootfs

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 memex \
 && useradd --system --uid 10001 --gid memex --home-dir /var/lib/memex --no-create-home --shell /usr/sbin/nologin memex
COPY --from=builder /rootfs/ /
RUN chown memex:memex /var/lib/memex
USER 10001:10001
WORKDIR /var/lib/memex
ENV MEMEX_CONFIG=/etc/memex/memex.toml
EXPOSE 50051
ENTRYPOINT ["/usr/local/bin/memex"]
CMD ["serve"]
