#!/usr/bin/env bash
# Build prerequisites for memex on Debian: a C toolchain (zstd and blake3 build C code) and a
# stable Rust toolchain >= 1.94 (sqlx 0.9). Idempotent: does nothing when both are present.
set -euo pipefail
log() { printf '[setup-toolchain] %s\n' "$*" >&2; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v cc >/dev/null || ! command -v make >/dev/null; then
  log "installing build-essential"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    build-essential ca-certificates curl >/dev/null
fi

[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
if ! command -v cargo >/dev/null; then
  log "installing Rust (stable) with rustup"
  command -v curl >/dev/null || { $SUDO apt-get install -y -qq curl ca-certificates >/dev/null; }
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
  . "$HOME/.cargo/env"
fi
version=$(rustc --version | awk '{print $2}')
major=${version%%.*}; rest=${version#*.}; minor=${rest%%.*}
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 94 ]; }; then
  log "rustc $version is too old: memex needs 1.94 or newer (rustup update stable)"
  exit 1
fi
