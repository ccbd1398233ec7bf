-- Each namespace's distinct fact subjects, so QueryFacts matches a subject by substring without
-- reading every fact.
--
-- QueryFacts matched `subject ILIKE '%…%'` through a trigram index (`*_memory_fact_text_search`).
-- Behind the tenant wall (`*_row_level_security.sql`) the planner may not use an index through
-- `~~*`, which is not LEAKPROOF (only a superuser could mark it), so each call read every fact of
-- the namespace: at 1M events (363,936 facts) about 100 ms on three parallel workers, and at 20
-- calls a second the server refused most of them. Subjects repeat (5,259 distinct there, the
-- same files, commands, tests and errors turn after turn), so the `ILIKE` now reads this table,
-- and the facts are found by subject equality, which is leakproof and uses the index below.
--
-- Statement triggers keep the table true to memory_facts whoever writes it (the worker, erasure,
-- a memory rebuild): a subject is added with its first fact and removed with its last.
CREATE TABLE memory_subjects (
    namespace_id  uuid NOT NULL,
    subject       text NOT NULL,
    PRIMARY KEY (namespace_id, subject)
);

-- A subject's facts in time order; the facts no newer one superseded (most of a chain's are, so
-- QueryFacts' default, current facts only, would otherwise read a long chain to keep its head).
CREATE INDEX memory_facts_by_subject ON memory_facts (namespace_id, subject, when_time);
CREATE INDEX memory_facts_live_by_subject ON memory_facts (namespace_id, subject, when_time) WHERE superseded_by IS NULL;
DROP INDEX memory_facts_subject_trgm;

CREATE FUNCTION memory_subjects_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_subjects (namespace_id, subject)
    SELECT DISTINCT namespace_id, subject FROM added
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE FUNCTION memory_subjects_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_subjects s
    USING (SELECT DISTINCT namespace_id, subject FROM removed) r
    WHERE s.namespace_id = r.namespace_id AND s.subject = r.subject
      AND NOT EXISTS (SELECT 1 FROM memory_facts f WHERE f.namespace_id = r.namespace_id AND f.subject = r.subject);
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_subjects_insert AFTER INSERT ON memory_facts
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_subjects_added();
CREATE TRIGGER memory_subjects_delete AFTER DELETE ON memory_facts
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION memory_subjects_removed();

INSERT INTO memory_subjects (namespace_id, subject)
SELECT DISTINCT namespace_id, subject FROM memory_facts;

-- Behind the wall like every tenant table.
ALTER TABLE memory_subjects ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_subjects FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_wall ON memory_subjects
    USING ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))
    WITH CHECK ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()));
