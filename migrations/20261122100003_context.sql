-- The TRACE context engine: versioned task state, agents' windows and pointer manifests, stored
-- retrieval packs, delegations and reports. Every table but the heads is append-only: task-state
-- versions, manifests and packs are kept forever so any window or pack can be replayed.

-- Task state: one row per version; the head holds the current version and is the compare-and-swap
-- target (UPDATE ... WHERE version = expected).
CREATE TABLE task_heads (
    namespace_id   uuid NOT NULL,
    task_id        text NOT NULL,
    version        bigint NOT NULL CHECK (version >= 1),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, task_id)
);

CREATE TABLE task_states (
    namespace_id uuid NOT NULL,
    task_id      text NOT NULL,
    version      bigint NOT NULL CHECK (version >= 1),
    state        jsonb NOT NULL,
    rendered     text NOT NULL,
    tokens       integer NOT NULL,
    tokenizer    text NOT NULL,
    author       text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, task_id, version)
);
CREATE TRIGGER task_states_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON task_states
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();

-- Each event records the version of its task's state current when it was written (its premise
-- reference). The append statement fills it from task_heads; NULL when the task has no state.
ALTER TABLE events ADD COLUMN task_state_version bigint;

-- Standing items of a session — decisions, constraints, reports, pinned events, events that
-- supersede another ("objective v3 supersedes v2") — are candidates of every pack of their task;
-- its system events form the pack's system block. One partial index serves both, so ordinary
-- events cost it only a predicate check (ingest cost measured in the context engine's notes).
CREATE INDEX events_standing ON events (session_id, seq)
    WHERE kind IN ('decision', 'constraint', 'report', 'system')
       OR (metadata ->> 'pin') = 'true' OR metadata ? 'supersedes';
-- A task's sessions.
CREATE INDEX sessions_task ON sessions (namespace_id, task_id) WHERE task_id IS NOT NULL;

-- An agent's window over its session: which events are resident. Everything not evicted is
-- resident; window_evictions lists evicted runs; manifests lists the manifests in the window.
CREATE TABLE context_windows (
    session_id   uuid PRIMARY KEY,
    namespace_id uuid NOT NULL,
    version      bigint NOT NULL DEFAULT 0,
    manifests    uuid[] NOT NULL DEFAULT '{}',
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pointer_manifests (
    id                 uuid PRIMARY KEY,
    namespace_id       uuid NOT NULL,
    session_id         uuid NOT NULL,
    window_version     bigint NOT NULL,
    task_state_version bigint,
    first_seq          bigint NOT NULL,
    last_seq           bigint NOT NULL,
    evicted_events     bigint NOT NULL,
    body               jsonb NOT NULL,
    rendered           text NOT NULL,
    tokens             integer NOT NULL,
    tokenizer          text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pointer_manifests_session ON pointer_manifests (session_id, window_version);
CREATE TRIGGER pointer_manifests_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON pointer_manifests
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();

CREATE TABLE window_evictions (
    session_id  uuid NOT NULL,
    first_seq   bigint NOT NULL,
    last_seq    bigint NOT NULL CHECK (last_seq >= first_seq),
    manifest_id uuid NOT NULL,
    PRIMARY KEY (session_id, first_seq)
);
CREATE TRIGGER window_evictions_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON window_evictions
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();

-- Retrieval packs exactly as built (text, blocks, items, every candidate's decision), and the
-- request they answered: GetPack replays the window an agent saw at turn N. `pack` is the pack's
-- JSON, zstd-compressed by the server: a pack is tens of KB, and having Postgres parse it as jsonb
-- and pglz-compress it was the largest database cost of BuildPack (perf, bench pack).
CREATE TABLE context_packs (
    id                 uuid PRIMARY KEY,
    namespace_id       uuid NOT NULL,
    session_id         uuid NOT NULL,
    task_id            text,
    task_state_version bigint,
    tokenizer          text NOT NULL,
    tokens             integer NOT NULL,
    request            jsonb NOT NULL,
    pack               bytea NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE context_packs ALTER COLUMN pack SET STORAGE EXTERNAL; -- already compressed
CREATE INDEX context_packs_session ON context_packs (session_id, created_at);
CREATE TRIGGER context_packs_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON context_packs
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();

-- Planner → executor (TRACE A.5): a delegation creates the child task.
CREATE TABLE delegations (
    namespace_id   uuid NOT NULL,
    task_id        text NOT NULL,
    parent_task_id text NOT NULL,
    objective      text NOT NULL,
    constraints    text[] NOT NULL,
    acceptance     text[] NOT NULL,
    pointers       jsonb NOT NULL,
    plan_node_ref  text,
    delegated_by   uuid,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace_id, task_id)
);
CREATE INDEX delegations_parent ON delegations (namespace_id, parent_task_id);

-- Executor → planner: compact reports with provenance pointers (each also a `report` event).
CREATE TABLE task_reports (
    seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id             uuid NOT NULL UNIQUE,
    namespace_id   uuid NOT NULL,
    task_id        text NOT NULL,
    parent_task_id text,
    session_id     uuid NOT NULL,
    event_id       uuid NOT NULL,
    status         text NOT NULL,
    summary        text NOT NULL,
    pointers       jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_reports_parent ON task_reports (namespace_id, parent_task_id, seq);
CREATE TRIGGER task_reports_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON task_reports
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();

-- WatchReports: every new report wakes the servers' listeners.
CREATE FUNCTION memex_notify_report() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('memex_reports', NEW.namespace_id::text || ' ' || NEW.seq::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER task_reports_notify AFTER INSERT ON task_reports
    FOR EACH ROW EXECUTE FUNCTION memex_notify_report();
