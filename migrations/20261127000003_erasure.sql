-- Erasure (EraseSubject): events are immutable, except through this one privileged path. An
-- erased event keeps its place (session, seq, id, kind, times), so every pointer still resolves,
-- to a tombstone; its text, artifact and metadata are gone, and so is everything derived from it.

-- The audit: who erased what, when and why. `seq` orders erasures for the replicas, which apply
-- each to their local text index (the derived state that is not in Postgres).
CREATE TABLE erasures (
    seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            uuid NOT NULL UNIQUE,
    namespace_id  uuid NOT NULL REFERENCES namespaces (id),
    requested_by  text NOT NULL,
    reason        text NOT NULL,
    sessions      uuid[] NOT NULL,
    counts        jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX erasures_namespace ON erasures (namespace_id, created_at);
CREATE TRIGGER erasures_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON erasures
    FOR EACH STATEMENT EXECUTE FUNCTION memex_refuse_change();

-- An erased session takes no more appends.
ALTER TABLE sessions ADD COLUMN erased_by uuid;

-- The append-only tables refuse every change, unless the transaction is an erasure: it sets
-- `memex.erasure` (SET LOCAL) to its id. TRUNCATE is refused always.
CREATE OR REPLACE FUNCTION memex_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'TRUNCATE' AND TG_TABLE_NAME <> 'erasures'
       AND coalesce(current_setting('memex.erasure', true), '') <> '' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'memex: table % is append-only; % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
