-- Imported traces: the raw source file is kept byte for byte as an artifact, and the session
-- records which one and under what file name. Such a session's events come from that file, so it
-- takes no further appends (the append statements require source_artifact_id IS NULL).
ALTER TABLE sessions
    ADD COLUMN source_artifact_id bytea CHECK (length(source_artifact_id) = 32),
    ADD COLUMN source_file_name   text;
