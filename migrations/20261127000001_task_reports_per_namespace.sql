-- A report's client-chosen id is unique within its namespace, not across all of them: a global
-- key let one tenant learn that another had used an id (its retry answered "not found" where a
-- fresh id succeeds), and made one tenant's ids constrain another's. Reports are small; this
-- rebuilds one narrow index.
ALTER TABLE task_reports DROP CONSTRAINT task_reports_id_key;
ALTER TABLE task_reports ADD CONSTRAINT task_reports_namespace_id_key UNIQUE (namespace_id, id);
