-- Dialogue facts (user rules, preferences, decisions: the types not chained by subject) are
-- matched by keyword when a new one arrives. One GIN index over every fact's keywords made that
-- read every rule sharing any keyword (a system prompt restated in each of 8,500 sessions: 75k
-- constraint facts, of which 226 were not superseded), 34 ms per new rule, nearly all of
-- Postgres's time in the worker. A new rule needs only: earlier rules not yet superseded (a GIN
-- index over those alone), earlier rules superseded by something after it (those whose span from
-- their own time to their superseder's holds its time: a GiST index over the spans), and the
-- first later rules restating it (in chain order). The predicate below must match
-- `supersession::DIALOGUE` (a test checks it).
CREATE INDEX memory_facts_live_keywords ON memory_facts USING gin (keywords) WITH (fastupdate = off)
    WHERE superseded_at IS NULL AND fact_type NOT IN ('file', 'command', 'test', 'package', 'error');
CREATE INDEX memory_facts_dialogue_span ON memory_facts USING gist (tstzrange(when_time, superseded_at, '[]'))
    WHERE superseded_at IS NOT NULL AND fact_type NOT IN ('file', 'command', 'test', 'package', 'error');
CREATE INDEX memory_facts_dialogue_order ON memory_facts (namespace_id, fact_type, who, when_time, session_id, first_seq, last_seq)
    WHERE fact_type NOT IN ('file', 'command', 'test', 'package', 'error');
DROP INDEX memory_facts_keywords;

-- A superseded rule leaves a dead entry in the index of live rules until a vacuum: 40k dead rows
-- made one read 16 ms, 0.9 ms after a vacuum. Supersession rewrites rows all the time, so the
-- table is vacuumed after 1% of it changed (the default waits for 20%). Without `fastupdate` the
-- small live index takes entries directly rather than in a pending list every read must scan.
ALTER TABLE memory_facts SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 2000);
