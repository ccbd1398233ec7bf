-- Every replica caches verified API keys. A revocation (or an earlier expiry) notifies them all
-- at once, whichever path made it: the RevokeApiKey RPC, `memex admin revoke-key`, or plain SQL.
CREATE FUNCTION memex_api_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('memex_keys', NEW.id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER api_keys_changed AFTER UPDATE ON api_keys
    FOR EACH ROW WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at)
    EXECUTE FUNCTION memex_api_keys_changed();
