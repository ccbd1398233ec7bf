-- Every key includes the namespace (ADR 006, "Known deviations", now none; issue 19).
--
-- Session ids can be chosen by the client (CreateSession, ImportTrace). While `sessions` was
-- keyed by `id` alone, an id taken in one namespace was refused in every other: a tenant could
-- tell that another tenant had used it, and two tenants deriving ids the same way (a UUIDv5 of a
-- project name) collided. Keyed by (id, namespace_id), each namespace has its own ids, and so do
-- the tables keyed by session. The namespace comes last so that every lookup by id or by
-- (session, seq) keeps using the same index. The keys of server-made ids (events, packs,
-- manifests, reports, embeddings) are widened too: it costs nothing in lookups, and it is the
-- re-keying a move to Citus needs (tests/api/schema.rs now allows no deviation).
--
-- Each ALTER rebuilds one index under an exclusive lock: on a large database, run it in a
-- maintenance window, as for any migration that rebuilds the events table's indexes.

ALTER TABLE sessions DROP CONSTRAINT sessions_parent_session_id_fkey;
ALTER TABLE sessions DROP CONSTRAINT sessions_pkey, ADD CONSTRAINT sessions_pkey PRIMARY KEY (id, namespace_id);
-- A parent is a session of the same namespace, now also by the database's own check.
ALTER TABLE sessions ADD CONSTRAINT sessions_parent_fkey
    FOREIGN KEY (parent_session_id, namespace_id) REFERENCES sessions (id, namespace_id);

ALTER TABLE events DROP CONSTRAINT events_pkey, ADD CONSTRAINT events_pkey PRIMARY KEY (session_id, seq, namespace_id);
DROP INDEX events_id;
CREATE UNIQUE INDEX events_id ON events (id, namespace_id);

ALTER TABLE embeddings DROP CONSTRAINT embeddings_pkey,
    ADD CONSTRAINT embeddings_pkey PRIMARY KEY (event_id, model, namespace_id);
ALTER TABLE embedding_progress DROP CONSTRAINT embedding_progress_pkey,
    ADD CONSTRAINT embedding_progress_pkey PRIMARY KEY (session_id, model, namespace_id);
ALTER TABLE context_windows DROP CONSTRAINT context_windows_pkey,
    ADD CONSTRAINT context_windows_pkey PRIMARY KEY (session_id, namespace_id);
ALTER TABLE window_evictions DROP CONSTRAINT window_evictions_pkey,
    ADD CONSTRAINT window_evictions_pkey PRIMARY KEY (session_id, first_seq, namespace_id);
ALTER TABLE pointer_manifests DROP CONSTRAINT pointer_manifests_pkey,
    ADD CONSTRAINT pointer_manifests_pkey PRIMARY KEY (id, namespace_id);
ALTER TABLE context_packs DROP CONSTRAINT context_packs_pkey,
    ADD CONSTRAINT context_packs_pkey PRIMARY KEY (id, namespace_id);
ALTER TABLE task_reports DROP CONSTRAINT task_reports_pkey,
    ADD CONSTRAINT task_reports_pkey PRIMARY KEY (seq, namespace_id);
