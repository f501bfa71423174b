-- 0041_status_scope: API keys may have the read-only `status` scope (the status page's key: GET /v1/status and
-- GET /v1/status/board, nothing else), so a key kept in a browser cannot delete channels or start runs.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_scopes_valid;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_scopes_valid
    CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['ingest', 'tokens', 'admin', 'status']::text[]);
