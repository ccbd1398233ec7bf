#!/usr/bin/env bash
# CPU-seconds per pack with 1, 2 and 3 `memex serve` replicas over one database: the servers'
# own utime+stime (/proc/PID/stat), summed over the replicas in use, divided by the packs they
# built. Replicas are added one at a time; each round spreads PACKS BuildPack calls round-robin
# over the replicas running, after one warm-up pack per session on each (its index catch-up and
# caches). Flat figures mean a replica costs nothing per pack beyond the pack itself.
#
#   MEMEX_BIN=target/release/memex PACKS=300 bash scripts/replica-cpu.sh
#
# Needs a Postgres where the URL's role may CREATE DATABASE (default: the test role of
# scripts/setup-postgres.sh). BM25 only (embedding provider none), to measure the servers alone.
set -euo pipefail

BIN=${MEMEX_BIN:-target/release/memex}
ADMIN_URL=${DATABASE_ADMIN_URL:-postgres://memex_test:memex_test@127.0.0.1:5432/postgres}
PACKS=${PACKS:-300}
SESSIONS=${SESSIONS:-12}
TURNS=${TURNS:-50} # 4 events each
CONCURRENCY=${CONCURRENCY:-4}
TICK=$(getconf CLK_TCK)

work=$(mktemp -d)
db="memex_replica_cpu_$$"
url="${ADMIN_URL%/*}/$db"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql -q "$ADMIN_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

psql -q "$ADMIN_URL" -c "CREATE DATABASE $db" >/dev/null
"$BIN" migrate --database-url "$url" >/dev/null
"$BIN" admin bootstrap --namespace cpu --key-file "$work/key" --database-url "$url" >/dev/null
cli() { # cli REPLICA ARGS...
  local n=$1
  shift
  "$BIN" "$@" --endpoint "http://127.0.0.1:$((47100 + n))" -n cpu --api-key-file "$work/key"
}
start_replica() {
  local n=$1
  MEMEX_SEARCH__INDEX_DIR="$work/index$n" MEMEX_EMBEDDING__PROVIDER=none MEMEX_LOG__FILTER=warn \
    "$BIN" serve --listen "127.0.0.1:$((47100 + n))" --database-url "$url" >"$work/serve$n.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    cli "$n" session list --limit 1 >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "replica $n did not start" >&2
  exit 1
}
cpu_ticks() { # utime + stime of the first $1 replicas
  local sum=0
  for p in "${pids[@]:0:$1}"; do
    read -r -a f <"/proc/$p/stat"
    sum=$((sum + f[13] + f[14]))
  done
  echo "$sum"
}

start_replica 1
sessions=()
for s in $(seq 1 "$SESSIONS"); do
  id=$(cli 1 session create --agent "agent-$s" --task "task-$((s % 3))")
  sessions+=("$id")
  for t in $(seq 1 "$TURNS"); do
    printf '%s\n' \
      "{\"kind\":\"user_message\",\"content\":\"session $s step $t: why does the deploy cache fail for crate c$((t % 17))?\"}" \
      "{\"kind\":\"tool_call\",\"tool_name\":\"Bash\",\"tool_call_id\":\"c$t\",\"content\":\"{\\\"command\\\":\\\"cargo test -p c$((t % 17))\\\"}\"}" \
      "{\"kind\":\"tool_result\",\"tool_call_id\":\"c$t\",\"content\":\"test c$((t % 17))::cache ... FAILED\\nerror[E0382]: borrow of moved value: key$t\"}" \
      "{\"kind\":\"assistant_message\",\"content\":\"Step $t: the key of c$((t % 17)) is moved; decision $t: clone it before the retry loop.\"}"
  done | cli 1 append --session "$id" >/dev/null
done

echo "replicas packs cpu_s_per_pack ms_per_pack_wall"
for r in 1 2 3; do
  [ "$r" -gt 1 ] && start_replica "$r"
  for n in $(seq 1 "$r"); do
    for id in "${sessions[@]}"; do cli "$n" pack build --session "$id" -m "warm-up" >/dev/null; done
  done
  before=$(cpu_ticks "$r")
  t0=$(date +%s%N)
  export -f cli
  export BIN work
  seq 1 "$PACKS" | xargs -P "$CONCURRENCY" -I{} bash -c '
    i={}; set -- '"${sessions[*]}"'; shift $((i % $#)); n=$((i % '"$r"' + 1))
    cli "$n" pack build --session "$1" -m "question $i: which crate c$((i % 17)) cache failure is still open?" >/dev/null'
  t1=$(date +%s%N)
  after=$(cpu_ticks "$r")
  awk -v r="$r" -v p="$PACKS" -v c=$((after - before)) -v tick="$TICK" -v w=$((t1 - t0)) \
    'BEGIN { printf "%d %d %.4f %.2f\n", r, p, c / tick / p, w / 1e6 / p }'
done
