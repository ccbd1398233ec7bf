-- The lossless event store: namespaces, API keys, sessions, append-only events, artifacts.
-- Postgres is the source of truth; every index elsewhere (tantivy, caches) is rebuilt from here.

CREATE TABLE namespaces (
    id          uuid PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- API keys: only a BLAKE3 hash of the token is stored. access: 1 read, 2 write, 3 admin.
CREATE TABLE api_keys (
    id          uuid PRIMARY KEY,
    namespace_id uuid NOT NULL REFERENCES namespaces (id),
    name        text NOT NULL,
    token_hash  bytea NOT NULL UNIQUE CHECK (length(token_hash) = 32),
    access      smallint NOT NULL CHECK (access BETWEEN 1 AND 3),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_namespace ON api_keys (namespace_id, created_at);

-- One agent's trace. next_seq is the seq the next event gets: the row is the per-session
-- sequence counter, locked by each append until it commits, which keeps seqs gapless.
CREATE TABLE sessions (
    id                uuid PRIMARY KEY,
    namespace_id      uuid NOT NULL REFERENCES namespaces (id),
    agent_id          text NOT NULL,
    parent_session_id uuid REFERENCES sessions (id),
    task_id           text,
    source_format     text NOT NULL,
    metadata          jsonb,
    created_at        timestamptz NOT NULL DEFAULT now(),
    next_seq          bigint NOT NULL DEFAULT 1
) WITH (fillfactor = 70); -- room for HOT updates of next_seq
CREATE INDEX sessions_listing ON sessions (namespace_id, created_at DESC, id DESC);

-- Artifacts: large tool outputs, content-addressed by the BLAKE3 hash of the uncompressed bytes,
-- stored once per namespace, zstd-compressed.
CREATE TABLE artifacts (
    namespace_id uuid NOT NULL REFERENCES namespaces (id),
    id           bytea NOT NULL CHECK (length(id) = 32),
    size         bigint NOT NULL CHECK (size >= 0),
    media_type   text NOT NULL,
    compression  text NOT NULL CHECK (compression IN ('zstd')),
    data         bytea NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, id)
);
ALTER TABLE artifacts ALTER COLUMN data SET STORAGE EXTERNAL; -- already compressed

-- Events: append-only. No foreign keys on purpose: the append statement writes the session
-- counter, the artifacts and the events together, so the references hold by construction, and
-- per-row FK triggers would halve ingest throughput.
CREATE TABLE events (
    session_id   uuid NOT NULL,
    seq          bigint NOT NULL,
    id           uuid NOT NULL,
    namespace_id uuid NOT NULL,
    kind         text NOT NULL,
    agent_id     text NOT NULL,
    task_id      text,
    tool_name    text,
    tool_call_id text,
    event_time   timestamptz NOT NULL,
    ingest_time  timestamptz NOT NULL DEFAULT now(),
    content      text NOT NULL,
    artifact_id  bytea,
    metadata     jsonb,
    PRIMARY KEY (session_id, seq)
);
CREATE UNIQUE INDEX events_id ON events (id);
CREATE INDEX events_tool_calls ON events (session_id, tool_call_id) WHERE kind = 'tool_call';

CREATE FUNCTION memex_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'memex: table % is append-only; % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();

-- Idempotency keys of committed append batches (one row per keyed batch).
CREATE TABLE append_batches (
    namespace_id    uuid NOT NULL,
    idempotency_key text NOT NULL,
    session_id      uuid NOT NULL,
    first_seq       bigint NOT NULL,
    event_count     integer NOT NULL,
    request_hash    bytea NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, idempotency_key)
);
