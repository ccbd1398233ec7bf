-- The handoff snapshot (BuildSnapshot) quotes a session's user requests, from the first on. In a
-- long agent session they are a few among thousands of tool events: this index reads just them.
CREATE INDEX events_user_messages ON events (session_id, seq) WHERE kind = 'user_message';
