-- A subject's supersession chain is read around the facts a job adds (the state before the
-- first, the state after the last), so the worker's cost per fact stays flat however long the
-- chain grows: the index is the chain's order. It replaces the (namespace, type, subject) index,
-- of which it is an extension.
CREATE INDEX memory_facts_chain ON memory_facts (namespace_id, fact_type, subject_key, when_time, session_id, first_seq, last_seq);
DROP INDEX memory_facts_subject;
