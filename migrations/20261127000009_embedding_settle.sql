-- When a session's last embedding job ended: its next job waits `[embedding] settle_ms` after it
-- (unless a full job's events wait), so a live session is embedded a second of appends at a time
-- rather than once per append. NULL: never embedded (a new session is embedded at once).
ALTER TABLE embedding_progress ADD COLUMN done_at timestamptz;
