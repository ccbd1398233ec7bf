#!/usr/bin/env bash
# Installs libfaketime (Debian's `faketime` package): services/memex/tests/crash/clock_skew.rs runs
# replicas whose wall clocks are hours off with it. Idempotent: nothing to do when it is there.
set -euo pipefail
LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
if [ -f "$LIB" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "install-faketime: no apt-get here; install libfaketime so that $LIB exists" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
# A fresh machine may have no package lists yet: update once, only then.
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends faketime >/dev/null 2>&1 || {
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends faketime >/dev/null
}
