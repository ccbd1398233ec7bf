-- How each pack was laid out (JSON: the tail's oldest entry, the stable evidence and the terms it
-- was excerpted for), so the session's next pack keeps them in place and starts with the same
-- bytes: a provider's prompt cache then serves that prefix at a tenth of the price. Read only
-- for a session's newest pack (context_packs_session); NULL for packs stored before.
ALTER TABLE context_packs ADD COLUMN layout bytea;
