-- QueryFacts matches subjects by substring (ILIKE '%…%'); without a trigram index that walks
-- every fact of the namespace (75 ms at 250k facts, seconds under load; 5 ms with it).
-- pg_trgm is a trusted contrib extension: the database owner may create it, and
-- scripts/setup-postgres.sh creates it as the superuser beside pgvector.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX memory_facts_subject_trgm ON memory_facts USING gin (subject gin_trgm_ops);
