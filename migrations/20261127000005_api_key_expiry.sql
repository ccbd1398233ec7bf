-- Key rotation with an overlap (RotateApiKey): the old key keeps working until expires_at, then
-- stops, like a revocation. Replicas are told when it is set, and check it at every use.
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
DROP TRIGGER api_keys_changed ON api_keys;
CREATE TRIGGER api_keys_changed AFTER UPDATE ON api_keys
    FOR EACH ROW WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at
                       OR OLD.expires_at IS DISTINCT FROM NEW.expires_at)
    EXECUTE FUNCTION memex_api_keys_changed();
