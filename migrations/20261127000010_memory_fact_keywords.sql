-- Dialogue facts' keywords, one row each, so a new rule finds the rules it may restate through
-- btree lookups that row-level security lets the planner use.
--
-- Migration `*_memory_dialogue_indexes.sql` found those rules with `keywords && $4` (a GIN index)
-- and a span's `@> $7` (a GiST index). Since the tenant wall (`*_row_level_security.sql`), every
-- query on memory_facts carries the policy's condition, and the planner may evaluate a query's
-- own condition before it only if the condition's function is LEAKPROOF: `arrayoverlap` and
-- `range_contains_elem` are not (only a superuser could mark them), so both indexes went unused
-- and each new rule read every dialogue fact of the database: 10-17 ms a rule instead of 0.3 ms,
-- a quarter of a core in the agent-loop bench. Equality and order on text, uuid and timestamptz
-- are leakproof, so these reads use the indexes below with the wall in place.
--
-- A trigger keeps the table true to memory_facts whoever writes it (the worker, supersession,
-- erasure); deleting a fact deletes its rows. The predicate below must match
-- `supersession::DIALOGUE` (a test checks it).
CREATE TABLE memory_fact_keywords (
    namespace_id   uuid NOT NULL,
    fact_id        uuid NOT NULL,
    keyword        text NOT NULL,
    fact_type      text NOT NULL,
    who            text NOT NULL,
    when_time      timestamptz NOT NULL,
    superseded_at  timestamptz,
    PRIMARY KEY (namespace_id, fact_id, keyword),
    FOREIGN KEY (namespace_id, fact_id) REFERENCES memory_facts (namespace_id, id) ON DELETE CASCADE
);
-- Rules not yet superseded sharing a keyword; rules superseded at or after a time (those whose
-- span from their own time to their superseder's may hold it).
CREATE INDEX memory_fact_keywords_live ON memory_fact_keywords (namespace_id, fact_type, who, keyword)
    INCLUDE (fact_id) WHERE superseded_at IS NULL;
CREATE INDEX memory_fact_keywords_superseded ON memory_fact_keywords (namespace_id, fact_type, who, keyword, superseded_at)
    INCLUDE (when_time, fact_id) WHERE superseded_at IS NOT NULL;

CREATE FUNCTION memory_fact_keywords_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO memory_fact_keywords (namespace_id, fact_id, keyword, fact_type, who, when_time, superseded_at)
        SELECT DISTINCT NEW.namespace_id, NEW.id, k, NEW.fact_type, NEW.who, NEW.when_time, NEW.superseded_at
        FROM unnest(NEW.keywords) AS k;
    ELSE
        UPDATE memory_fact_keywords SET superseded_at = NEW.superseded_at
        WHERE namespace_id = NEW.namespace_id AND fact_id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_fact_keywords_insert AFTER INSERT ON memory_facts FOR EACH ROW
    WHEN (NEW.fact_type NOT IN ('file', 'command', 'test', 'package', 'error'))
    EXECUTE FUNCTION memory_fact_keywords_sync();
CREATE TRIGGER memory_fact_keywords_supersede AFTER UPDATE OF superseded_at ON memory_facts FOR EACH ROW
    WHEN (NEW.fact_type NOT IN ('file', 'command', 'test', 'package', 'error')
          AND OLD.superseded_at IS DISTINCT FROM NEW.superseded_at)
    EXECUTE FUNCTION memory_fact_keywords_sync();

INSERT INTO memory_fact_keywords (namespace_id, fact_id, keyword, fact_type, who, when_time, superseded_at)
SELECT DISTINCT f.namespace_id, f.id, k, f.fact_type, f.who, f.when_time, f.superseded_at
FROM memory_facts f CROSS JOIN LATERAL unnest(f.keywords) AS k
WHERE f.fact_type NOT IN ('file', 'command', 'test', 'package', 'error');

-- The indexes these rows replace.
DROP INDEX memory_facts_live_keywords;
DROP INDEX memory_facts_dialogue_span;

-- Behind the wall like every tenant table.
ALTER TABLE memory_fact_keywords ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_fact_keywords FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_wall ON memory_fact_keywords
    USING ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))
    WITH CHECK ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()));
-- Rewritten whenever a rule is superseded, as memory_facts is.
ALTER TABLE memory_fact_keywords SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 2000);
