#!/usr/bin/env bash
# Lays out the runtime root of the memex container image in DEST: what the Dockerfile's builder
# stage runs, and what services/memex/tests/image.rs runs (no Docker engine is needed for either).
#
#   scripts/build-image-rootfs.sh DEST [--binary PATH] [--model-from DIR]
#
#   (default)          cargo build --release --locked -p memex, and use that binary
#   --binary PATH      use an already built memex binary instead (the test passes its debug one)
#   --model-from DIR   copy the embedding model (and its distilled static table, DIR-static, when
#                      there) from DIR instead of downloading it; hash-checked all the same
#
# DEST receives:
#   usr/local/bin/memex                           the binary, without debug info (line tables
#                                                 are most of a release binary's size)
#   opt/memex/models/all-MiniLM-L6-v2/            the model, by scripts/fetch-model.sh (hash-checked)
#   opt/memex/models/all-MiniLM-L6-v2-static/     the fast tier's static table, distilled here so
#                                                 that no pod distils it (~half a minute of CPU)
#   etc/memex/memex.toml                          the image's default configuration
#   var/lib/memex/                                the working directory (text indexes, derived)
# Everything is world-readable: the image runs as a non-root user.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '[build-image-rootfs] %s\n' "$*" >&2; }
usage() { sed -n 2,12p "$0" >&2; exit 2; }

DEST="" BIN="" MODEL_FROM=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BIN=${2:?--binary needs a path}; shift 2 ;;
    --model-from) MODEL_FROM=${2:?--model-from needs a directory}; shift 2 ;;
    -h|--help) usage ;;
    -*) log "unknown option $1"; usage ;;
    *) [ -z "$DEST" ] || usage; DEST=$1; shift ;;
  esac
done
[ -n "$DEST" ] || usage
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

if [ -z "$BIN" ]; then
  log "building the release binary"
  cargo build --release --locked -p memex
  BIN=${CARGO_TARGET_DIR:-target}/release/memex
fi
[ -x "$BIN" ] || { log "no executable at $BIN"; exit 1; }

# 1. The binary, stripped of debug info (the symbol table stays: panics still name functions).
install -d -m 0755 "$DEST/usr/local/bin"
objcopy --strip-debug "$BIN" "$DEST/usr/local/bin/memex"
chmod 0755 "$DEST/usr/local/bin/memex"
log "binary: $(stat -c %s "$BIN") bytes as built, $(stat -c %s "$DEST/usr/local/bin/memex") bytes stripped"

# 2. The model, through the same hash-checked script as `make setup`.
MODEL_DIR="$DEST/opt/memex/models/all-MiniLM-L6-v2"
if [ -n "$MODEL_FROM" ]; then
  install -d -m 0755 "$MODEL_DIR"
  cp "$MODEL_FROM"/config.json "$MODEL_FROM"/tokenizer.json "$MODEL_FROM"/model.safetensors "$MODEL_DIR"/
  if [ -s "${MODEL_FROM%/}-static/model.safetensors" ]; then
    install -d -m 0755 "$MODEL_DIR-static"
    cp "${MODEL_FROM%/}-static"/* "$MODEL_DIR-static"/
  fi
fi
MODEL_DIR="$MODEL_DIR" bash scripts/fetch-model.sh

# 3. The default configuration: every replica setting that differs from `memex serve`'s defaults.
install -d -m 0755 "$DEST/etc/memex" "$DEST/var/lib/memex"
cat >"$DEST/etc/memex/memex.toml" <<'EOF'
# The image's defaults (memex config prints the effective configuration). Override any key with
# MEMEX_<SECTION>__<KEY> (e.g. MEMEX_DATABASE__URL) or mount another file at /etc/memex/memex.toml.
listen = "0.0.0.0:50051"

[search]
index_dir = "/var/lib/memex/index"    # derived from Postgres: an emptyDir is enough

[embedding]
model_dir = "/opt/memex/models/all-MiniLM-L6-v2"

[log]
format = "json"
EOF

# 4. The static table, distilled now (loaded and checked when it is already there), and a check
#    that the laid-out binary runs and reads the default configuration.
export MEMEX_EMBEDDING__MODEL_DIR="$MODEL_DIR"
"$DEST/usr/local/bin/memex" model distill --config "$DEST/etc/memex/memex.toml"
"$DEST/usr/local/bin/memex" config --config "$DEST/etc/memex/memex.toml" >/dev/null
rm -f "$MODEL_DIR-static.lock"   # taken only while distilling
chmod -R a+rX "$DEST/opt/memex" "$DEST/etc/memex"
log "runtime root ready in $DEST ($(du -sh "$DEST" | cut -f1))"
