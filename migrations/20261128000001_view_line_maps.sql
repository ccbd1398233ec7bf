-- Where each event sits in its session's full view, as of one compiled version: derived state
-- (memex-views compiles it again on a miss), kept so that citing a session's lines (pointers
-- in memory's answers, a search hit's lines, a handoff) does not compile the session again in
-- every process that cites it. A few bytes per event: (source line, chain, first, last) as
-- little-endian u32s, ordered by source line.
--
-- version: the session's version the map was made from (its event count; 0 for an imported
-- trace, which never changes). stable_before: the first line of chain 1 a later version may
-- change, so a map of an older version still answers for blocks wholly before it.
-- Sessions are never deleted; an erasure rewrites a session's events and deletes its map.
CREATE TABLE view_line_maps (
    namespace_id  uuid NOT NULL,
    session_id    uuid NOT NULL,
    version       bigint NOT NULL,
    stable_before bigint NOT NULL,
    map           bytea NOT NULL,
    PRIMARY KEY (namespace_id, session_id)
);

-- Behind the wall like every tenant table.
ALTER TABLE view_line_maps ENABLE ROW LEVEL SECURITY;
ALTER TABLE view_line_maps FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_wall ON view_line_maps
    USING ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))
    WITH CHECK ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()));
