#!/usr/bin/env bash
# A bounded fuzzing pass for CI: every cargo-fuzz target of both fuzz workspaces runs for
# FUZZ_SECONDS (default 20) from its seed corpus, then every saved regression input is replayed.
# Exits non-zero if any target crashes (panic, sanitizer report, timeout, OOM) or fails to build.
#
#   scripts/fuzz-smoke.sh                     # both workspaces, 20 s per target
#   FUZZ_SECONDS=60 scripts/fuzz-smoke.sh     # longer
#   FUZZ_TARGET_DIR=/tmp/fuzz-target scripts/fuzz-smoke.sh   # one build dir for both workspaces
#
# Stable toolchain: libFuzzer's nightly flags are unlocked with RUSTC_BOOTSTRAP=1, as in
# crates/vcc/fuzz/README.md. New corpus entries go to a temporary directory, so the repository's
# seed corpora are only read. Builds and runs are niced (FUZZ_NICE, default 19).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${FUZZ_SECONDS:-20}"
niceness="${FUZZ_NICE:-19}"
export RUSTC_BOOTSTRAP=1

# workspace dir (relative to the repo root) and its targets
workspaces=(
  "crates/vcc/fuzz:auto claude codex gemini memex"
  "fuzz:event_batch pointer config rpc_decode"
)

start=$(date +%s)
log() { printf '[fuzz-smoke %4ss] %s\n' "$(($(date +%s) - start))" "$*"; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked || cargo install cargo-fuzz
fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/fuzz-smoke.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT

failures=()
for entry in "${workspaces[@]}"; do
  dir="${entry%%:*}"
  read -r -a targets <<<"${entry#*:}"
  cd "$root/$dir"
  export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$root/$dir/target}"
  log "$dir: building ${targets[*]} (release, ASan) in $CARGO_TARGET_DIR"
  if ! nice -n "$niceness" cargo fuzz build -O; then
    failures+=("$dir: build")
    continue
  fi
  for t in "${targets[@]}"; do
    new="$scratch/$dir/$t"
    mkdir -p "$new" "corpus/$t"
    log "$dir: $t for ${seconds}s"
    if ! nice -n "$niceness" cargo fuzz run -O "$t" "$new" "corpus/$t" -- \
      -max_total_time="$seconds" -max_len=65536 -timeout=60 -print_final_stats=1 \
      >"$scratch/$t.log" 2>&1; then
      failures+=("$dir: $t")
      tail -n 60 "$scratch/$t.log" >&2
    else
      grep -E '^Done [0-9]+ runs' "$scratch/$t.log" | sed 's/^/  /' || true
    fi
    if [[ -d "regressions/$t" ]]; then
      mapfile -t inputs < <(find "regressions/$t" -type f | sort)
      if ((${#inputs[@]})); then
        log "$dir: $t replaying ${#inputs[@]} regression input(s)"
        if ! nice -n "$niceness" cargo fuzz run -O "$t" "${inputs[@]}" -- -timeout=60 >"$scratch/$t.replay.log" 2>&1; then
          failures+=("$dir: $t (regressions)")
          tail -n 60 "$scratch/$t.replay.log" >&2
        fi
      fi
    fi
  done
done

if ((${#failures[@]})); then
  log "FAILED: ${failures[*]}"
  exit 1
fi
log "all targets clean"
