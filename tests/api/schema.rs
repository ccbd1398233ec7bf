//! The schema stays shardable by namespace (docs/adr/006-citus-sharding.md): read from the
//! catalog of a freshly migrated database, every table but the reference tables has a
//! `namespace_id` column, and every primary key, unique constraint or index, and foreign key
//! between distributed tables includes it (migration `20261128000002_keys_per_namespace.sql`
//! re-keyed the last ones: session ids are per namespace).
use sqlx::{Connection, PgConnection};

/// Global by design: replicated whole to every node.
const REFERENCE_TABLES: [&str; 3] = ["namespaces", "api_keys", "erasures"];

#[tokio::test]
async fn every_table_and_key_includes_the_namespace_but_the_reference_tables() {
    let Some(db) = memex_tests::test_db().await else { return };
    let mut c = PgConnection::connect(&db.url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname NOT LIKE '\\_sqlx%'
         ORDER BY 1",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    assert!(tables.len() > 10 && tables.iter().any(|t| t == "events"), "{tables:?}");
    for t in REFERENCE_TABLES {
        assert!(tables.iter().any(|x| x == t), "reference table {t} exists");
    }

    // Every distributed table has the distribution column, never null.
    let without: Vec<String> = sqlx::query_scalar(
        "SELECT t FROM unnest($1::text[]) t WHERE t <> ALL($2) AND NOT EXISTS (
             SELECT 1 FROM information_schema.columns col
             WHERE col.table_schema = 'public' AND col.table_name = t
               AND col.column_name = 'namespace_id' AND col.is_nullable = 'NO')",
    )
    .bind(&tables)
    .bind(&REFERENCE_TABLES[..])
    .fetch_all(&mut c)
    .await
    .unwrap();
    assert!(without.is_empty(), "tables without a NOT NULL namespace_id: {without:?}");

    // Unique keys (constraints and bare unique indexes) and foreign keys between distributed
    // tables that leave `namespace_id` out. A foreign key to a reference table is fine.
    let violations: Vec<String> = sqlx::query_scalar(
        "WITH ns AS (
             SELECT attrelid, attnum FROM pg_attribute WHERE attname = 'namespace_id' AND NOT attisdropped
         ), keys AS (
             SELECT i.indrelid AS rel, ic.relname::text AS name,
                    CASE WHEN i.indisprimary THEN 'primary key' ELSE 'unique index' END AS kind,
                    i.indkey::int2[] AS cols, NULL::oid AS ref, NULL::int2[] AS refcols
             FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
             WHERE i.indisunique
             UNION ALL
             SELECT con.conrelid, con.conname::text, 'foreign key', con.conkey, con.confrelid, con.confkey
             FROM pg_constraint con WHERE con.contype = 'f'
         )
         SELECT c.relname || ': ' || k.kind || ' ' || k.name
         FROM keys k JOIN pg_class c ON c.oid = k.rel JOIN pg_namespace n ON n.oid = c.relnamespace
         LEFT JOIN pg_class r ON r.oid = k.ref
         WHERE n.nspname = 'public' AND c.relname::text = ANY($1) AND c.relname::text <> ALL($2)
           AND (r.relname IS NULL OR r.relname::text <> ALL($2))
           AND (NOT EXISTS (SELECT 1 FROM ns WHERE ns.attrelid = k.rel AND ns.attnum = ANY(k.cols))
                OR (k.ref IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM ns WHERE ns.attrelid = k.ref AND ns.attnum = ANY(k.refcols))))
         ORDER BY 1",
    )
    .bind(&tables)
    .bind(&REFERENCE_TABLES[..])
    .fetch_all(&mut c)
    .await
    .unwrap();
    assert!(violations.is_empty(), "keys without namespace_id (ADR 006): {violations:?}");
}
