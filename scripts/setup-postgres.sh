#!/usr/bin/env bash
# Bring up a local PostgreSQL 15 with pgvector 0.8.0 for memex: install, build, start, create roles.
#
# Idempotent: every step checks before it acts, so `make run` and `make test` call it every time.
# Works on a fresh Debian bookworm machine as root (or through sudo). Only Debian's own package
# servers are used; pgvector is built from Debian trixie's source package, because bookworm has no
# pgvector package (see docs/adr/001-local-postgres.md).
#
# Creates:
#   role memex      (LOGIN, owner of database memex)         -> used by `memex serve` (make run)
#   role memex_test (LOGIN SUPERUSER, creates test databases) -> used by the test harness
#   role memex_app_test (LOGIN, NOSUPERUSER NOBYPASSRLS)       -> owns the test databases; the
#                   servers under test connect as it, so row-level security holds them (ADR 008)
#   cluster 15/standby on port 5433: a hot standby streaming from 15/main (physical slot
#   memex_standby), for `[database] read_url` and its tests (TEST_STANDBY_URL). MEMEX_STANDBY=0
#   skips it.
# The extension `vector` is created in the memex database and in template1, because
# CREATE EXTENSION vector needs a superuser and the service role is not one.
set -euo pipefail

PG_MAJOR=15
PGVECTOR_VERSION=0.8.0
PG_CONFIG=/usr/lib/postgresql/$PG_MAJOR/bin/pg_config
PG_PORT=${MEMEX_PG_PORT:-5432}
STANDBY_PORT=${MEMEX_STANDBY_PORT:-5433}
STANDBY_SLOT=memex_standby

log() { printf '[setup-postgres] %s\n' "$*" >&2; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { log "run as root or install sudo"; exit 1; }
  SUDO="sudo"
fi
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres -- "$@"; fi
}

apt_updated=0
# Set when this run installed packages: apt may have upgraded postgresql-$PG_MAJOR with them
# (postgresql-server-dev pulls the matching server), and a postmaster already running keeps the
# old binary, which cannot load the new version's libraries (plpgsql.so: undefined symbol).
apt_installed=0
apt_install() {
  apt_installed=1
  if [ "$apt_updated" -eq 0 ]; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# 1. PostgreSQL 15 server and client.
if [ ! -x /usr/lib/postgresql/$PG_MAJOR/bin/postgres ]; then
  log "installing postgresql-$PG_MAJOR"
  apt_install "postgresql-$PG_MAJOR" "postgresql-client-$PG_MAJOR"
fi

# 2. pgvector, built from source when the extension is missing.
if [ ! -f /usr/share/postgresql/$PG_MAJOR/extension/vector.control ]; then
  log "building pgvector $PGVECTOR_VERSION from Debian's source package"
  [ -x "$PG_CONFIG" ] || apt_install "postgresql-server-dev-$PG_MAJOR"
  command -v make >/dev/null && command -v gcc >/dev/null || apt_install build-essential
  dpkg -s "postgresql-server-dev-$PG_MAJOR" >/dev/null 2>&1 || apt_install "postgresql-server-dev-$PG_MAJOR"
  work=$(mktemp -d)
  chmod 755 "$work" # apt's _apt user must be able to write the lists
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial"
  echo "deb-src http://deb.debian.org/debian trixie main" >"$work/src.list"
  apt_src=(-o Dir::Etc::sourcelist="$work/src.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$work/lists")
  $SUDO apt-get "${apt_src[@]}" update -qq
  (cd "$work" && $SUDO apt-get "${apt_src[@]}" source --download-only pgvector >/dev/null)
  tar xzf "$work"/pgvector_${PGVECTOR_VERSION}.orig.tar.gz -C "$work"
  make -s -C "$work/pgvector-$PGVECTOR_VERSION" PG_CONFIG="$PG_CONFIG" >/dev/null
  $SUDO make -s -C "$work/pgvector-$PGVECTOR_VERSION" PG_CONFIG="$PG_CONFIG" install >/dev/null
fi

# 3. The cluster: create if missing, start if stopped.
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$PG_MAJOR main"; then
  log "creating cluster $PG_MAJOR/main"
  $SUDO pg_createcluster "$PG_MAJOR" main --port "$PG_PORT" >/dev/null
fi
if ! pg_lsclusters -h | awk -v v="$PG_MAJOR" '$1==v && $2=="main" {print $4}' | grep -q online; then
  log "starting cluster $PG_MAJOR/main"
  $SUDO pg_ctlcluster "$PG_MAJOR" main start
elif [ "$apt_installed" -eq 1 ]; then
  log "restarting cluster $PG_MAJOR/main on the binaries just installed"
  $SUDO pg_ctlcluster "$PG_MAJOR" main restart
fi
for _ in $(seq 1 50); do
  as_postgres pg_isready -q -p "$PG_PORT" && break
  sleep 0.2
done
as_postgres pg_isready -q -p "$PG_PORT" || { log "postgres did not become ready"; exit 1; }

# 3b. Settings for memex's write pattern (every BuildPack commits a pack record). Backends that
# write out dirty pages ask the kernel to flush them every 256 kB instead of leaving bursts of
# dirty data that stall the next WAL fsync: it took bench pack's p99 at 256 packs/s from one run
# in seven under 20 ms to seven in nine (docs/adr/001-local-postgres.md).
conf="/etc/postgresql/$PG_MAJOR/main/conf.d/memex.conf"
# The standby's replication slot keeps the WAL it has not received yet, up to a cap, so a standby
# left stopped cannot fill the disk (past it the slot is lost and step 5 rebuilds the standby).
# wal_level = replica and max_wal_senders = 10 are PostgreSQL 15's defaults: nothing to restart.
want="# Written by memex scripts/setup-postgres.sh
backend_flush_after = 256kB
max_slot_wal_keep_size = 2GB"
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  log "writing $conf"
  printf '%s\n' "$want" | $SUDO tee "$conf" >/dev/null
  $SUDO pg_ctlcluster "$PG_MAJOR" main reload
fi

# 4. Roles, database, extension.
psql_admin() { as_postgres psql -p "$PG_PORT" -v ON_ERROR_STOP=1 -qAt "$@"; }
psql_admin -d postgres <<'SQL'
DO $$BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'memex') THEN
    CREATE ROLE memex LOGIN PASSWORD 'memex';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'memex_test') THEN
    CREATE ROLE memex_test LOGIN SUPERUSER PASSWORD 'memex_test';
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'memex_app_test') THEN
    CREATE ROLE memex_app_test LOGIN PASSWORD 'memex_app_test';
  END IF;
  -- Superusers and BYPASSRLS roles skip row-level security: the service roles must be neither.
  ALTER ROLE memex NOSUPERUSER NOBYPASSRLS;
  ALTER ROLE memex_app_test NOSUPERUSER NOBYPASSRLS;
END$$;
SQL
if [ "$(psql_admin -d postgres -c "SELECT 1 FROM pg_database WHERE datname = 'memex'")" != "1" ]; then
  log "creating database memex"
  psql_admin -d postgres -c "CREATE DATABASE memex OWNER memex"
fi
psql_admin -d memex -c "CREATE EXTENSION IF NOT EXISTS vector"
psql_admin -d template1 -c "CREATE EXTENSION IF NOT EXISTS vector"
# pg_trgm (contrib, trusted): an early migration creates it for an index a later one dropped
# (behind the tenant wall no index serves ILIKE); a new database still runs both.
psql_admin -d memex -c "CREATE EXTENSION IF NOT EXISTS pg_trgm"
psql_admin -d template1 -c "CREATE EXTENSION IF NOT EXISTS pg_trgm"

# 5. A hot standby: cluster $PG_MAJOR/standby, a base backup of main streaming from it through a
# physical slot (replication over the local socket as postgres: Debian's pg_hba allows it, peer).
# It replicates the whole cluster, roles and databases included, so every database created on
# main (each test's) appears on it after replay. Rebuilt when its slot was lost or it is no standby.
cluster_exists() { pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$PG_MAJOR $1"; }
standby_data=/var/lib/postgresql/$PG_MAJOR/standby
if [ "${MEMEX_STANDBY:-1}" != 0 ]; then
  slot=$(psql_admin -d postgres -c "SELECT coalesce(wal_status, 'none') FROM pg_replication_slots WHERE slot_name = '$STANDBY_SLOT'")
  if cluster_exists standby && { [ "$slot" = "" ] || [ "$slot" = lost ] || ! $SUDO test -f "$standby_data/standby.signal"; }; then
    log "standby $PG_MAJOR/standby is broken (slot: ${slot:-missing}): rebuilding it"
    $SUDO pg_dropcluster --stop "$PG_MAJOR" standby
  fi
  if ! cluster_exists standby; then
    log "creating hot standby $PG_MAJOR/standby on port $STANDBY_PORT (a base backup of main)"
    if [ -n "$slot" ]; then
      psql_admin -d postgres -c "SELECT pg_drop_replication_slot('$STANDBY_SLOT')" >/dev/null
    fi
    $SUDO pg_createcluster "$PG_MAJOR" standby --port "$STANDBY_PORT" >/dev/null
    $SUDO find "$standby_data" -mindepth 1 -delete
    as_postgres pg_basebackup -p "$PG_PORT" -D "$standby_data" -R -X stream -C -S "$STANDBY_SLOT" --checkpoint=fast
    # A fresh base backup is synced at first start; syncfs does that per file system, not per file
    # (fsync of a cluster with hundreds of test databases took minutes).
    printf '# Written by memex scripts/setup-postgres.sh\nrecovery_init_sync_method = syncfs\n' \
      | $SUDO tee "/etc/postgresql/$PG_MAJOR/standby/conf.d/memex.conf" >/dev/null
  fi
  if ! pg_lsclusters -h | awk -v v="$PG_MAJOR" '$1==v && $2=="standby" {print $4}' | grep -q online; then
    log "starting standby $PG_MAJOR/standby"
    $SUDO pg_ctlcluster "$PG_MAJOR" standby start -- -t 600
  elif [ "$apt_installed" -eq 1 ]; then
    log "restarting standby $PG_MAJOR/standby on the binaries just installed"
    $SUDO pg_ctlcluster "$PG_MAJOR" standby restart -- -t 600
  fi
  # Until it has replayed to a consistent point it refuses connections ("starting up").
  for _ in $(seq 1 3000); do
    as_postgres pg_isready -q -p "$STANDBY_PORT" && break
    sleep 0.2
  done
  [ "$(as_postgres psql -p "$STANDBY_PORT" -qAt -d postgres -c "SELECT pg_is_in_recovery()")" = t ] \
    || { log "the cluster on port $STANDBY_PORT is not a standby"; exit 1; }
  log "standby ready: postgres://memex:memex@127.0.0.1:$STANDBY_PORT/memex (read_url)"
fi

log "ready: postgres://memex:memex@127.0.0.1:$PG_PORT/memex (pgvector $(psql_admin -d memex -c "SELECT extversion FROM pg_extension WHERE extname = 'vector'"))"
