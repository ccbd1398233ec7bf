-- Quotas, per namespace (NULL: the server's default, [limits] in memex.toml; 0 there: none).
-- max_events_per_sec is enforced by each replica on its own appends; max_stored_bytes against
-- namespace_usage, which replicas add to about once a second and `memex admin quota --recount`
-- (and every erasure) sets from the rows themselves.
ALTER TABLE namespaces
    ADD COLUMN max_events_per_sec integer CHECK (max_events_per_sec > 0),
    ADD COLUMN max_stored_bytes   bigint  CHECK (max_stored_bytes > 0);

-- Bytes a namespace stores: event contents plus artifact bodies.
CREATE TABLE namespace_usage (
    namespace_id uuid PRIMARY KEY REFERENCES namespaces (id),
    stored_bytes bigint NOT NULL DEFAULT 0,
    recounted_at timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- Behind the tenancy wall like every tenant table (20261127000006_row_level_security.sql).
ALTER TABLE namespace_usage ENABLE ROW LEVEL SECURITY;
ALTER TABLE namespace_usage FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_wall ON namespace_usage
    USING ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))
    WITH CHECK ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()));
