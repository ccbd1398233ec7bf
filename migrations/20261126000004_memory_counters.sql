-- GetMemoryStatus counted the rows of four tables per call: seconds at a quarter of a million
-- facts, and a load on Postgres of its own when polled. The worker now keeps the counts beside
-- the namespace's version, in the transactions that insert the rows (claims register sessions,
-- jobs insert segments and facts and move `fact_seq`, rebuilds write topics), so a status is one
-- row read. `events` is the sum of the namespace's `memory_progress.fact_seq`: the events read.
ALTER TABLE memory_namespaces
    ADD COLUMN sessions bigint NOT NULL DEFAULT 0,
    ADD COLUMN segments bigint NOT NULL DEFAULT 0,
    ADD COLUMN facts    bigint NOT NULL DEFAULT 0,
    ADD COLUMN topics   bigint NOT NULL DEFAULT 0,
    ADD COLUMN events   bigint NOT NULL DEFAULT 0;

INSERT INTO memory_namespaces (namespace_id, built_version)
SELECT DISTINCT namespace_id, 0 FROM memory_progress
ON CONFLICT (namespace_id) DO NOTHING;

UPDATE memory_namespaces n SET
    sessions = (SELECT count(*) FROM memory_progress p WHERE p.namespace_id = n.namespace_id),
    segments = (SELECT count(*) FROM memory_segments s WHERE s.namespace_id = n.namespace_id),
    facts    = (SELECT count(*) FROM memory_facts f WHERE f.namespace_id = n.namespace_id),
    topics   = (SELECT count(*) FROM memory_topics t WHERE t.namespace_id = n.namespace_id),
    events   = (SELECT COALESCE(sum(p.fact_seq), 0) FROM memory_progress p WHERE p.namespace_id = n.namespace_id);
