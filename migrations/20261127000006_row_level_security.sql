-- Row-level security: the second wall of tenancy (docs/adr/008-row-level-security.md).
--
-- Every query names its namespace; these policies hold even one that forgot to. Each tenant
-- table shows and accepts only the rows of the tenant in the session setting `memex.tenant`,
-- which the service's pools set on every connection they hand out (memex-store, `tenant.rs`):
--   a namespace id  that namespace's rows only (an RPC, once its caller is known);
--   '*'             every row (background work, admin RPCs that span namespaces);
--   unset, '', …    no row at all: a path that set no tenant finds nothing and writes nothing.
-- FORCE, because the service role owns these tables and owners are otherwise exempt. Superusers
-- and BYPASSRLS roles skip every policy: the server warns at start when it connects as one.

-- STABLE, never raising: the policies call them on every query, whatever the setting holds.
CREATE FUNCTION memex_tenant_all() RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(current_setting('memex.tenant', true), '') = '*'
$$;

CREATE FUNCTION memex_tenant() RETURNS uuid LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN t ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN t::uuid END
    FROM (SELECT current_setting('memex.tenant', true) AS t) AS setting
$$;

-- One policy per table, for every command, read and write alike. The functions are wrapped in
-- (SELECT …) so each is an InitPlan, computed once per query rather than once per row: the
-- policy is then a cheap filter on the rows a query's own (indexed) conditions find.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY[
        'api_keys', 'append_batches', 'artifacts', 'context_packs', 'context_windows', 'delegations',
        'embedding_progress', 'embeddings', 'erasures', 'events', 'memory_facts', 'memory_namespaces',
        'memory_progress', 'memory_readers', 'memory_segments', 'memory_topics', 'memory_turns',
        'pack_chunks', 'pointer_manifests', 'sessions', 'task_heads', 'task_reports', 'task_states',
        'window_evictions'
    ] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY tenant_wall ON %I
                 USING ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))
                 WITH CHECK ((SELECT memex_tenant_all()) OR namespace_id = (SELECT memex_tenant()))', t);
    END LOOP;
END
$$;

-- The tenants themselves: a namespace sees its own row.
ALTER TABLE namespaces ENABLE ROW LEVEL SECURITY;
ALTER TABLE namespaces FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_wall ON namespaces
    USING ((SELECT memex_tenant_all()) OR id = (SELECT memex_tenant()))
    WITH CHECK ((SELECT memex_tenant_all()) OR id = (SELECT memex_tenant()));
