-- 0022_app_credential_faults: an app whose credentials APNs refuses is parked, not its requests failed one
-- by one. A 403 other than ExpiredProviderToken (InvalidProviderToken, BadCertificate, TopicMismatch,
-- UnrelatedKeyIdInToken...) says the app's key, team or certificate is wrong, whatever the request: the
-- app's creates, deletes and broadcasts then wait until `retry_at` (5 minutes, doubling with each window
-- that ends in another refusal, up to 1 hour). When the window ends, one request of the app (any instance's)
-- takes the probe (`probe_until`) and goes; the rest wait for its answer. A refusal parks the app again; a
-- success deletes the row and makes the app's waiting broadcasts due at once. A channel create refused this
-- way stays a retry: it never becomes create_failed. `GET /v1/status` lists the rows.
CREATE TABLE app_credential_faults (
    app_id      bigint PRIMARY KEY REFERENCES apps (id) ON DELETE CASCADE,
    reason      text NOT NULL,
    since       timestamptz NOT NULL,
    strikes     integer NOT NULL CONSTRAINT app_credential_faults_strikes_positive CHECK (strikes > 0),
    retry_at    timestamptz NOT NULL,
    last_at     timestamptz NOT NULL,
    probe_until timestamptz
);
