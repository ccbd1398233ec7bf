-- Every table carries its namespace id, the distribution column a sharded (Citus) deployment
-- would use (docs/adr/006-citus-sharding.md); window_evictions was the one table without it.
ALTER TABLE window_evictions ADD COLUMN namespace_id uuid;

-- Backfill from the session. The table is append-only: its guard is set aside for this only.
ALTER TABLE window_evictions DISABLE TRIGGER window_evictions_append_only;
UPDATE window_evictions e SET namespace_id = s.namespace_id FROM sessions s WHERE s.id = e.session_id;
ALTER TABLE window_evictions ENABLE TRIGGER window_evictions_append_only;

-- A replica still running the previous release (a rolling upgrade) inserts without the column:
-- fill it from the session, as the backfill did.
CREATE FUNCTION memex_eviction_namespace() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.namespace_id IS NULL THEN
        SELECT s.namespace_id INTO NEW.namespace_id FROM sessions s WHERE s.id = NEW.session_id;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER window_evictions_namespace BEFORE INSERT ON window_evictions
    FOR EACH ROW EXECUTE FUNCTION memex_eviction_namespace();

ALTER TABLE window_evictions ALTER COLUMN namespace_id SET NOT NULL;
