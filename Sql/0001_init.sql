-- 0001_init: the foundation schema of Marquee.
--
-- Conventions (later migrations follow them):
-- * ids are bigint identities; rows of one app refer to each other through composite foreign keys
--   (app_id, id), so a row can never point at another app's event, type or channel.
-- * enumerations are text with a named CHECK (…_valid), so a later migration can widen one with
--   DROP CONSTRAINT / ADD CONSTRAINT and Swift decodes them as plain strings.
-- * times are timestamptz; every "state" column has CHECKs tying it to the times it implies.
-- * a landed migration is never edited: the runner refuses to start when a checksum changes.

-- Apps: one row per bundle id and APNs environment, with the signing key (a path, never the key).
CREATE TABLE apps (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    bundle_id       text NOT NULL CONSTRAINT apps_bundle_id_valid
                        CHECK (bundle_id ~ '^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$' AND length(bundle_id) <= 255),
    environment     text NOT NULL CONSTRAINT apps_environment_valid
                        CHECK (environment IN ('development', 'production')),
    team_id         text NOT NULL CONSTRAINT apps_team_id_valid CHECK (team_id ~ '^[A-Z0-9]{10}$'),
    key_id          text NOT NULL CONSTRAINT apps_key_id_valid CHECK (key_id ~ '^[A-Z0-9]{10}$'),
    key_path        text NOT NULL CONSTRAINT apps_key_path_valid CHECK (key_path <> ''),
    -- Overrides of Apple's hosts (e.g. the APNs simulator); NULL means Apple's host for the environment.
    push_url        text CONSTRAINT apps_push_url_valid CHECK (push_url ~ '^https://'),
    management_url  text CONSTRAINT apps_management_url_valid CHECK (management_url ~ '^https://'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT apps_bundle_environment_unique UNIQUE (bundle_id, environment)
);

-- API keys: the secret is shown once; only a salted hash is kept. `prefix` is public and finds the row.
CREATE TABLE api_keys (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- NULL: the key works for every app (operators); otherwise for this app only.
    app_id          bigint REFERENCES apps (id) ON DELETE CASCADE,
    name            text NOT NULL CONSTRAINT api_keys_name_valid CHECK (name <> '' AND length(name) <= 200),
    prefix          text NOT NULL CONSTRAINT api_keys_prefix_valid CHECK (prefix ~ '^[A-Za-z0-9_]{6,32}$'),
    salt            bytea NOT NULL CONSTRAINT api_keys_salt_valid CHECK (length(salt) >= 16),
    hash            bytea NOT NULL CONSTRAINT api_keys_hash_valid CHECK (length(hash) = 32),
    scopes          text[] NOT NULL CONSTRAINT api_keys_scopes_valid
                        CHECK (cardinality(scopes) > 0 AND scopes <@ ARRAY['ingest', 'tokens', 'admin']::text[]),
    created_at      timestamptz NOT NULL DEFAULT now(),
    revoked_at      timestamptz CONSTRAINT api_keys_revoked_after_created CHECK (revoked_at >= created_at),
    last_used_at    timestamptz,
    CONSTRAINT api_keys_prefix_unique UNIQUE (prefix)
);

-- Attribute types: the schema of an ActivityAttributes type and of its ContentState, per app
-- (dev and prod apps of one bundle register theirs separately; names are the Swift type names).
CREATE TABLE attribute_types (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id                bigint NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    name                  text NOT NULL CONSTRAINT attribute_types_name_valid
                              CHECK (name ~ '^[A-Za-z_][A-Za-z0-9_.]*$' AND length(name) <= 200),
    attributes_schema     jsonb NOT NULL CONSTRAINT attribute_types_attributes_schema_valid
                              CHECK (jsonb_typeof(attributes_schema) = 'object'),
    content_state_schema  jsonb NOT NULL CONSTRAINT attribute_types_content_state_schema_valid
                              CHECK (jsonb_typeof(content_state_schema) = 'object'),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT attribute_types_name_unique UNIQUE (app_id, name),
    CONSTRAINT attribute_types_app_id_unique UNIQUE (app_id, id)
);

-- Events: a match or a flight, with the latest content-state (the state an app fetches on foreground).
CREATE TABLE events (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id              bigint NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    external_id         text NOT NULL CONSTRAINT events_external_id_valid
                            CHECK (external_id <> '' AND length(external_id) <= 200),
    kind                text NOT NULL CONSTRAINT events_kind_valid CHECK (kind IN ('match', 'flight', 'other')),
    attribute_type_id   bigint NOT NULL,
    attributes          jsonb NOT NULL DEFAULT '{}' CONSTRAINT events_attributes_valid
                            CHECK (jsonb_typeof(attributes) = 'object'),
    storage_policy      text NOT NULL CONSTRAINT events_storage_policy_valid
                            CHECK (storage_policy IN ('none', 'mostRecent')),
    status              text NOT NULL DEFAULT 'scheduled' CONSTRAINT events_status_valid
                            CHECK (status IN ('scheduled', 'live', 'ending', 'ended', 'cancelled')),
    -- APNs no longer knows the event's channel (ChannelNotRegistered): an operator must act.
    channel_lost        boolean NOT NULL DEFAULT false,
    starts_at           timestamptz NOT NULL,
    ends_at             timestamptz CONSTRAINT events_ends_after_start CHECK (ends_at >= starts_at),
    topics              text[] NOT NULL DEFAULT '{}',
    -- The latest accepted content-state, when it occurred, and the update that carried it.
    latest_state        jsonb CONSTRAINT events_latest_state_valid CHECK (jsonb_typeof(latest_state) = 'object'),
    latest_state_at     timestamptz,
    latest_update_id    bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_external_id_unique UNIQUE (app_id, external_id),
    CONSTRAINT events_app_id_unique UNIQUE (app_id, id),
    CONSTRAINT events_attribute_type_same_app FOREIGN KEY (app_id, attribute_type_id)
        REFERENCES attribute_types (app_id, id),
    CONSTRAINT events_latest_state_complete
        CHECK ((latest_state IS NULL) = (latest_state_at IS NULL)
               AND (latest_update_id IS NULL OR latest_state IS NOT NULL))
);
-- The scheduler: events to open channels for, and events to end.
CREATE INDEX events_to_start ON events (starts_at) WHERE status = 'scheduled';
CREATE INDEX events_to_end ON events (ends_at) WHERE status IN ('live', 'ending');
CREATE INDEX events_attribute_type ON events (attribute_type_id);

-- Channels: APNs broadcast channels. Forever until deleted, 10,000 per app, so every one is tracked,
-- including unknown ones found by reconciling with Apple's list (event_id NULL).
CREATE TABLE channels (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id              bigint NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    event_id            bigint,
    -- Apple's base64 channel id; NULL until the create request has answered.
    apns_channel_id     text CONSTRAINT channels_apns_channel_id_valid
                            CHECK (apns_channel_id ~ '^[A-Za-z0-9+/]+={0,2}$'),
    storage_policy      text NOT NULL CONSTRAINT channels_storage_policy_valid
                            CHECK (storage_policy IN ('none', 'mostRecent')),
    -- The states of MarqueeCore's ChannelLifecycle, plus 'unknown': a channel in Apple's list that
    -- Marquee did not make for any event (found by reconcile).
    state               text NOT NULL DEFAULT 'planned' CONSTRAINT channels_state_valid
                            CHECK (state IN ('planned', 'creating', 'create_unknown', 'create_failed', 'open',
                                             'ending', 'ended', 'deleting', 'deleted', 'lost', 'unknown')),
    -- Attempts of the current create or delete, and when the next retry is due (NULL: not waiting).
    attempts            integer NOT NULL DEFAULT 0 CONSTRAINT channels_attempts_valid CHECK (attempts >= 0),
    next_attempt_at     timestamptz,
    requested_at        timestamptz,
    opened_at           timestamptz,
    ended_at            timestamptz,
    deleted_at          timestamptz,
    -- When Marquee first saw the channel (its own create answer, or Apple's list: it has no dates).
    first_seen_at       timestamptz,
    -- aps.timestamp of the last broadcast: the next one must be strictly greater.
    last_aps_timestamp  bigint CONSTRAINT channels_last_aps_timestamp_valid CHECK (last_aps_timestamp > 0),
    last_error          text,
    last_error_at       timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT channels_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id),
    CONSTRAINT channels_apns_channel_id_unique UNIQUE (app_id, apns_channel_id),
    CONSTRAINT channels_has_id CHECK (state IN ('planned', 'creating', 'create_unknown', 'create_failed')
                                      OR apns_channel_id IS NOT NULL),
    CONSTRAINT channels_has_event CHECK (event_id IS NOT NULL OR state IN ('unknown', 'deleting', 'deleted')),
    CONSTRAINT channels_requested_has_time CHECK (state NOT IN ('creating', 'create_unknown') OR requested_at IS NOT NULL),
    CONSTRAINT channels_open_has_time CHECK (state <> 'open' OR opened_at IS NOT NULL),
    CONSTRAINT channels_ended_has_time CHECK (state <> 'ended' OR ended_at IS NOT NULL),
    CONSTRAINT channels_deleted_has_time CHECK (state <> 'deleted' OR deleted_at IS NOT NULL),
    CONSTRAINT channels_seen_has_time CHECK (apns_channel_id IS NULL OR first_seen_at IS NOT NULL)
);
-- At most one live channel per event.
CREATE UNIQUE INDEX channels_one_live_per_event ON channels (event_id)
    WHERE state IN ('planned', 'creating', 'create_unknown', 'create_failed', 'open', 'ending');
-- The scheduler's retries of creates and deletes.
CREATE INDEX channels_retry_due ON channels (next_attempt_at) WHERE next_attempt_at IS NOT NULL;
CREATE INDEX channels_event ON channels (event_id);
-- Quota counting and the scheduler's scans: channels by app and state.
CREATE INDEX channels_app_state ON channels (app_id, state);
CREATE INDEX channels_to_delete ON channels (ended_at) WHERE state = 'ended';

-- Updates: every accepted update, and what became of it.
CREATE TABLE updates (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id          bigint NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    api_key_id        bigint REFERENCES api_keys (id) ON DELETE SET NULL,
    -- 'end' ends the Live Activities (an `end` broadcast) with its final state.
    action            text NOT NULL DEFAULT 'update' CONSTRAINT updates_action_valid
                          CHECK (action IN ('update', 'end')),
    content_state     jsonb NOT NULL CONSTRAINT updates_content_state_valid
                          CHECK (jsonb_typeof(content_state) = 'object'),
    alert             jsonb CONSTRAINT updates_alert_valid CHECK (jsonb_typeof(alert) = 'object'),
    stale_date        timestamptz,
    dismissal_date    timestamptz CONSTRAINT updates_dismissal_only_on_end
                          CHECK (dismissal_date IS NULL OR action = 'end'),
    relevance_score   double precision CONSTRAINT updates_relevance_score_valid
                          CHECK (relevance_score >= 0 AND relevance_score <> 'Infinity'),
    priority          text NOT NULL DEFAULT 'auto' CONSTRAINT updates_priority_valid
                          CHECK (priority IN ('auto', 'high', 'low')),
    occurred_at       timestamptz NOT NULL,
    received_at       timestamptz NOT NULL DEFAULT now(),
    disposition       text NOT NULL DEFAULT 'pending' CONSTRAINT updates_disposition_valid
                          CHECK (disposition IN ('pending', 'broadcast', 'conflated', 'superseded')),
    disposed_at       timestamptz,
    CONSTRAINT updates_disposed_has_time CHECK ((disposition = 'pending') = (disposed_at IS NULL))
);
-- The latest state of an event, and its pending updates.
CREATE INDEX updates_event_latest ON updates (event_id, occurred_at DESC, id DESC);
CREATE INDEX updates_pending ON updates (event_id) WHERE disposition = 'pending';
CREATE INDEX updates_api_key ON updates (api_key_id) WHERE api_key_id IS NOT NULL;

ALTER TABLE events ADD CONSTRAINT events_latest_update_fk
    FOREIGN KEY (latest_update_id) REFERENCES updates (id) ON DELETE SET NULL (latest_update_id)
    DEFERRABLE INITIALLY DEFERRED;
CREATE INDEX events_latest_update ON events (latest_update_id) WHERE latest_update_id IS NOT NULL;

-- The outbox: durable pending broadcast work, one row per event (an ingest upserts it with the newest
-- update, which conflates older pending ones). Dispatchers claim due rows with
--   SELECT ... FROM outbox WHERE next_attempt_at <= now() ORDER BY next_attempt_at
--   LIMIT n FOR UPDATE SKIP LOCKED
-- and retry with backoff by raising attempts and next_attempt_at.
CREATE TABLE outbox (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id          bigint NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    -- The channel the work goes to; NULL while the event has no open channel yet.
    channel_id        bigint REFERENCES channels (id) ON DELETE CASCADE,
    update_id         bigint NOT NULL REFERENCES updates (id) ON DELETE CASCADE,
    attempts          integer NOT NULL DEFAULT 0 CONSTRAINT outbox_attempts_valid CHECK (attempts >= 0),
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_one_per_event UNIQUE (event_id)
);
CREATE INDEX outbox_due ON outbox (next_attempt_at);
CREATE INDEX outbox_channel ON outbox (channel_id) WHERE channel_id IS NOT NULL;
CREATE INDEX outbox_update ON outbox (update_id);

-- Idempotency keys: a repeated request with the same key gets the stored answer for 24 hours; the
-- same key with another body (request_hash) is refused. response_* stay NULL while the first runs.
CREATE TABLE idempotency_keys (
    api_key_id        bigint NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    key               text NOT NULL CONSTRAINT idempotency_keys_key_valid CHECK (length(key) BETWEEN 1 AND 255),
    request_hash      bytea NOT NULL CONSTRAINT idempotency_keys_request_hash_valid CHECK (length(request_hash) = 32),
    response_status   integer CONSTRAINT idempotency_keys_response_status_valid CHECK (response_status BETWEEN 100 AND 599),
    response_body     bytea,
    created_at        timestamptz NOT NULL DEFAULT now(),
    expires_at        timestamptz NOT NULL DEFAULT now() + interval '24 hours',
    PRIMARY KEY (api_key_id, key),
    CONSTRAINT idempotency_keys_response_complete CHECK ((response_status IS NULL) = (response_body IS NULL)),
    CONSTRAINT idempotency_keys_expiry_valid CHECK (expires_at > created_at)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- Deliveries: every exchange with APNs (broadcasts and channel management), answered or not.
CREATE TABLE deliveries (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id            bigint NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    kind              text NOT NULL CONSTRAINT deliveries_kind_valid
                          CHECK (kind IN ('broadcast', 'channel_create', 'channel_read', 'channel_delete',
                                          'channel_list', 'push')),
    channel_id        bigint REFERENCES channels (id) ON DELETE CASCADE,
    update_id         bigint REFERENCES updates (id) ON DELETE SET NULL,
    apns_request_id   uuid,
    apns_unique_id    uuid,
    -- HTTP status; NULL when no answer came (timeout, connection lost), then reason says why.
    status            integer CONSTRAINT deliveries_status_valid CHECK (status BETWEEN 100 AND 599),
    reason            text,
    latency_us        bigint CONSTRAINT deliveries_latency_valid CHECK (latency_us >= 0),
    priority          smallint CONSTRAINT deliveries_priority_valid CHECK (priority IN (1, 5, 10)),
    attempt           integer NOT NULL DEFAULT 1 CONSTRAINT deliveries_attempt_valid CHECK (attempt >= 1),
    aps_timestamp     bigint,
    sent_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT deliveries_answer_or_reason CHECK (status IS NOT NULL OR reason IS NOT NULL),
    CONSTRAINT deliveries_broadcast_has_channel CHECK (kind <> 'broadcast' OR channel_id IS NOT NULL)
);
CREATE INDEX deliveries_channel ON deliveries (channel_id, sent_at DESC);
CREATE INDEX deliveries_update ON deliveries (update_id) WHERE update_id IS NOT NULL;
CREATE INDEX deliveries_sent_at ON deliveries (sent_at);

-- Leader leases: one row per lease. Taking over an expired lease raises `fencing`; work done under
-- a lease carries its fencing number, so a stale leader's late writes can be refused.
CREATE TABLE leader_leases (
    name          text PRIMARY KEY CONSTRAINT leader_leases_name_valid CHECK (name <> ''),
    holder        text NOT NULL CONSTRAINT leader_leases_holder_valid CHECK (holder <> ''),
    fencing       bigint NOT NULL DEFAULT 1 CONSTRAINT leader_leases_fencing_valid CHECK (fencing > 0),
    acquired_at   timestamptz NOT NULL DEFAULT now(),
    renewed_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    CONSTRAINT leader_leases_expiry_valid CHECK (expires_at >= acquired_at)
);
