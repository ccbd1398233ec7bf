# memex — the two commands of the README, and the steps they are made of.
#   make run    set up PostgreSQL 15 + pgvector, build, bootstrap the `default` namespace, serve gRPC on
#               127.0.0.1:50051 and MCP (streamable HTTP) on http://127.0.0.1:50052/mcp
#   make test   set up the database (and its hot standby on :5433) and run every test against it
# Both are idempotent. Set-up needs root (or sudo) the first time.

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)

DATABASE_URL      ?= postgres://memex:memex@127.0.0.1:5432/memex
TEST_DATABASE_URL ?= postgres://memex_test:memex_test@127.0.0.1:5432/postgres
# The hot standby scripts/setup-postgres.sh streams from the cluster (tests of [database] read_url).
TEST_STANDBY_URL  ?= postgres://memex_test:memex_test@127.0.0.1:5433/postgres
CARGO             ?= cargo
BIN               := $${CARGO_TARGET_DIR:-target}/release/memex
BENCH_BIN         := $${CARGO_TARGET_DIR:-target}/release/memex-bench

.PHONY: run test setup toolchain db model mcp-inspector build release release-bench lint fmt bench-ingest clean-test-dbs

run: setup release
	$(BIN) model distill
	$(BIN) admin bootstrap --namespace default --key-file .memex/dev.key --database-url $(DATABASE_URL)
	@echo "API key for namespace 'default' is in .memex/dev.key"
	$(BIN) serve --database-url $(DATABASE_URL) --mcp-http-addr 127.0.0.1:50052

test: setup mcp-inspector
	$(CARGO) run --locked -q -p memex -- model distill
	TEST_DATABASE_URL=$(TEST_DATABASE_URL) TEST_STANDBY_URL=$(TEST_STANDBY_URL) $(CARGO) test --workspace --locked

setup: toolchain db model

toolchain:
	@bash scripts/setup-toolchain.sh

db:
	@bash scripts/setup-postgres.sh

model:
	@bash scripts/fetch-model.sh

# The official MCP Inspector (npm), the independent MCP client of tests/api/mcp_inspector.rs.
mcp-inspector:
	@bash scripts/install-mcp-inspector.sh

build:
	$(CARGO) build --workspace --locked

release:
	$(CARGO) build --release --locked -p memex

# The benchmarks are a binary of their own (memex-bench); the product binary carries none of them.
release-bench:
	$(CARGO) build --release --locked -p memex-bench

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

clean-test-dbs:
	runuser -u postgres -- psql -qAt -c "SELECT 'DROP DATABASE IF EXISTS \"' || datname || '\" WITH (FORCE);' FROM pg_database WHERE datname LIKE 'memex\_t\_%' OR datname LIKE 'memex\_tmpl\_%'" | runuser -u postgres -- psql -q

bench-ingest: setup release-bench
	$(BENCH_BIN) ingest --database-url $(DATABASE_URL)
