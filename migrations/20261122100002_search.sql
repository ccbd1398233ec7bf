-- Derived search state in Postgres: event embeddings (pgvector) and the embedding worker's
-- per-session progress. Like every index, this is derived from `events` and can be rebuilt from
-- it; nothing here is ever the only copy of anything.

-- One vector per (event, model). The column is dimensionless so several models can coexist during a
-- model change; each model gets its own partial HNSW index over `embedding::vector(dim)`, created
-- by the server for the configured model (memex-index `vectors::ensure_model_index`).
-- Filter columns are copied from the event so filtered k-NN needs no join.
CREATE TABLE embeddings (
    event_id     uuid NOT NULL,
    model        text NOT NULL,
    dim          integer NOT NULL CHECK (dim > 0),
    namespace_id uuid NOT NULL,
    session_id   uuid NOT NULL,
    seq          bigint NOT NULL,
    kind         text NOT NULL,
    role         text NOT NULL,
    agent_id     text NOT NULL,
    task_id      text,
    event_time   timestamptz NOT NULL,
    embedding    vector NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, model),
    CHECK (vector_dims(embedding) = dim)
);
-- Exact k-NN inside a small namespace, and the namespace/model scans of a re-embed.
CREATE INDEX embeddings_namespace ON embeddings (namespace_id, model, session_id, seq);

-- How far the embedding worker has got, per session and model (every seq up to `seq` is embedded
-- or had no text). A lease lets several replicas share the work without embedding twice.
CREATE TABLE embedding_progress (
    session_id    uuid NOT NULL,
    model         text NOT NULL,
    namespace_id  uuid NOT NULL,
    seq           bigint NOT NULL DEFAULT 0,
    leased_until  timestamptz,
    leased_by     text,
    PRIMARY KEY (session_id, model)
);
