-- Topics and segments found by tag with an index, behind the tenant wall.
--
-- ExpandTopic found its topic with `tag = $2 OR $2 = ANY(aliases)` and its segments with
-- `tags && $2`. Behind the tenant wall (`*_row_level_security.sql`) the planner may not use an
-- index through `&&` or `@>` (arrayoverlap and arraycontains are not LEAKPROOF, and only a
-- superuser could mark them), and `= ANY(column)` has none to use: at 1M events each call read
-- all 15,319 topics (15-23 ms) and all 21,335 segments (45-65 ms). Text and uuid equality are
-- leakproof, so these two tables hold one row per (alias, topic) and per (tag, segment), and
-- readers find them by equality.
--
-- Statement triggers keep both true to their tables whoever writes them (the worker, erasure, a
-- memory rebuild), as memory_subjects is kept (`*_memory_subjects.sql`).

CREATE TABLE memory_topic_aliases (
    namespace_id  uuid NOT NULL,
    alias         text NOT NULL,
    tag           text NOT NULL,
    PRIMARY KEY (namespace_id, alias, tag)
);
CREATE INDEX memory_topic_aliases_tag ON memory_topic_aliases (namespace_id, tag);

-- A segment's row under each of its tags, with what ExpandTopic orders by: a topic's newest
-- segments are the first entries of its tag in `_newest` (a subtopic's, those whose segment
-- also carries a co-tag, a probe of the key each), and only those are read from memory_segments.
CREATE TABLE memory_segment_tags (
    namespace_id  uuid NOT NULL,
    segment_id    uuid NOT NULL,
    tag           text NOT NULL,
    session_id    uuid NOT NULL,
    first_seq     bigint NOT NULL,
    end_time      timestamptz NOT NULL,
    PRIMARY KEY (namespace_id, segment_id, tag)
);
CREATE INDEX memory_segment_tags_newest
    ON memory_segment_tags (namespace_id, tag, end_time DESC, session_id, first_seq DESC, segment_id);

CREATE FUNCTION memory_topic_aliases_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_topic_aliases (namespace_id, alias, tag)
    SELECT a.namespace_id, x.alias, a.tag FROM added a CROSS JOIN LATERAL unnest(a.aliases) AS x(alias)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE FUNCTION memory_topic_aliases_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_topic_aliases x USING removed r
    WHERE x.namespace_id = r.namespace_id AND x.tag = r.tag;
    RETURN NULL;
END
$$;
-- An update (the worker's upsert) replaces the aliases of the topics whose aliases changed.
CREATE FUNCTION memory_topic_aliases_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_topic_aliases x USING removed r JOIN added a ON a.namespace_id = r.namespace_id AND a.tag = r.tag
    WHERE x.namespace_id = r.namespace_id AND x.tag = r.tag AND a.aliases IS DISTINCT FROM r.aliases;
    INSERT INTO memory_topic_aliases (namespace_id, alias, tag)
    SELECT a.namespace_id, x.alias, a.tag
    FROM added a JOIN removed r ON a.namespace_id = r.namespace_id AND a.tag = r.tag
    CROSS JOIN LATERAL unnest(a.aliases) AS x(alias)
    WHERE a.aliases IS DISTINCT FROM r.aliases
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_topic_aliases_insert AFTER INSERT ON memory_topics
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_topic_aliases_added();
CREATE TRIGGER memory_topic_aliases_update AFTER UPDATE ON memory_topics
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_topic_aliases_changed();
CREATE TRIGGER memory_topic_aliases_delete AFTER DELETE ON memory_topics
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION memory_topic_aliases_removed();

CREATE FUNCTION memory_segment_tags_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memory_segment_tags (namespace_id, tag, segment_id, session_id, first_seq, end_time)
    SELECT a.namespace_id, x.tag, a.id, a.session_id, a.first_seq, a.end_time
    FROM added a CROSS JOIN LATERAL unnest(a.tags) AS x(tag)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE FUNCTION memory_segment_tags_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_segment_tags x USING removed r
    WHERE x.namespace_id = r.namespace_id AND x.segment_id = r.id;
    RETURN NULL;
END
$$;
-- The worker rewrites an open segment as it grows, and counts its facts after: only a change
-- of tags or end replaces its rows.
CREATE FUNCTION memory_segment_tags_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_segment_tags x USING removed r JOIN added a ON a.namespace_id = r.namespace_id AND a.id = r.id
    WHERE x.namespace_id = r.namespace_id AND x.segment_id = r.id
      AND (a.tags IS DISTINCT FROM r.tags OR a.end_time IS DISTINCT FROM r.end_time
           OR a.session_id IS DISTINCT FROM r.session_id OR a.first_seq IS DISTINCT FROM r.first_seq);
    INSERT INTO memory_segment_tags (namespace_id, tag, segment_id, session_id, first_seq, end_time)
    SELECT a.namespace_id, x.tag, a.id, a.session_id, a.first_seq, a.end_time
    FROM added a JOIN removed r ON a.namespace_id = r.namespace_id AND a.id = r.id
    CROSS JOIN LATERAL unnest(a.tags) AS x(tag)
    WHERE a.tags IS DISTINCT FROM r.tags OR a.end_time IS DISTINCT FROM r.end_time
       OR a.session_id IS DISTINCT FROM r.session_id OR a.first_seq IS DISTINCT FROM r.first_seq
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_segment_tags_insert AFTER INSERT ON memory_segments
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_segment_tags_added();
CREATE TRIGGER memory_segment_tags_update AFTER UPDATE ON memory_segments
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION memory_segment_tags_changed();
CREATE TRIGGER memory_segment_tags_delete AFTER DELETE ON memory_segments
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION memory_segment_tags_removed();

INSERT INTO memory_topic_aliases (namespace_id, alias, tag)
SELECT t.namespace_id, x.alias, t.tag FROM memory_topics t CROSS JOIN LATERAL unnest(t.aliases) AS x(alias)
ON CONFLICT DO NOTHING;
INSERT INTO memory_segment_tags (namespace_id, tag, segment_id, session_id, first_seq, end_time)
SELECT s.namespace_id, x.tag, s.id, s.session_id, s.first_seq, s.end_time
FROM memory_segments s CROSS JOIN LATERAL unnest(s.tags) AS x(tag)
ON CONFLICT DO NOTHING;

-- Nothing reads segments through their tags any more; the wall kept the planner from it anyway.
DROP INDEX memory_segments_tags;

-- RecallAll reads the topics of the cover, largest first.
CREATE INDEX memory_topics_cover ON memory_topics (namespace_id, turns DESC, tag) WHERE in_cover;

-- Behind the wall like every tenant table.
ALTER TABLE memory_topic_aliases ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_topic_aliases FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_wall ON memory_topic_aliases
    USING ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))
    WITH CHECK ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()));
ALTER TABLE memory_segment_tags ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_segment_tags FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_wall ON memory_segment_tags
    USING ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))
    WITH CHECK ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()));
