#!/usr/bin/env bash
# Puts promtool (from Debian's `prometheus` package) at tools/prometheus/usr/bin/promtool
# (git-ignored): deploy/prometheus/alerts.yaml is checked with `promtool check rules` by
# services/memex/tests/otel. Only the package's files are unpacked (apt-get download + dpkg-deb -x):
# installing the package would start a Prometheus server and pull ~40 web packages, and the
# tests need neither. Idempotent: nothing to do when promtool is there (or on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=tools/prometheus
if [ -x "$DIR/usr/bin/promtool" ] || command -v promtool >/dev/null; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install-promtool: no apt-get here; install promtool and put it on PATH (or set PROMTOOL)" >&2
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A fresh machine may have no package lists yet: update once, only then.
(cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) || { apt-get update -qq && (cd "$tmp" && apt-get download prometheus); }
mkdir -p "$DIR"
dpkg-deb -x "$tmp"/prometheus_*.deb "$DIR"
rm -f "$DIR/usr/bin/prometheus"   # the server: not needed
"$DIR/usr/bin/promtool" --version | head -1 >&2
