-- Pieces of stored packs (TRACE A.2 replay), each kept once per namespace under its id: the first
-- 16 bytes of the BLAKE3 hash of its bytes. A pack's row (context_packs.pack) is a manifest that
-- names its chunks; a session's consecutive packs share most of them (the same tail, items and
-- often whole blocks), so a pack writes only what is new. Chunks are never changed or removed
-- while a pack names them; the table is append-only like context_packs.
CREATE TABLE pack_chunks (
    namespace_id uuid  NOT NULL,
    id           bytea NOT NULL,
    body         bytea NOT NULL, -- zstd, compressed by the server
    PRIMARY KEY (namespace_id, id)
);
ALTER TABLE pack_chunks ALTER COLUMN body SET STORAGE EXTERNAL; -- already compressed
CREATE TRIGGER pack_chunks_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON pack_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();
