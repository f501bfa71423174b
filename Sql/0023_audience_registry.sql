-- 0023_audience_registry: what app backends tell Marquee about their users' devices. An installation is one
-- install of the app (the app's own id for it); it has at most one current push-to-start token (on its row,
-- so an event's audience is read with one join), the Live Activities it runs, and what it follows. The start fan-out and per-activity mirroring read these tables.
-- Every row belongs to one app row (bundle id and environment), and refers to the app's events through the
-- composite keys of 0001, so it can never point at another app's event.

CREATE TABLE installations (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id                   bigint NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    -- The app's own id for this install (a UUID it keeps in its container, for example).
    installation_id          text NOT NULL CONSTRAINT installations_installation_id_valid
                                 CHECK (installation_id <> '' AND length(installation_id) <= 200),
    -- The OS version as sent, and parsed as numbers ("17.10" sorts after "17.2"); NULL until told.
    os_version               text CONSTRAINT installations_os_version_valid CHECK (length(os_version) <= 20),
    os_major                 integer,
    os_minor                 integer,
    os_patch                 integer,
    app_build                text CONSTRAINT installations_app_build_valid CHECK (length(app_build) <= 100),
    locale                   text CONSTRAINT installations_locale_valid CHECK (length(locale) <= 50),
    frequent_pushes_enabled  boolean NOT NULL DEFAULT true,
    live_activities_enabled  boolean NOT NULL DEFAULT true,
    -- APNs answered DeviceTokenNotForTopic for a token of this installation: the app's registration is wrong.
    topic_refused_at         timestamptz,
    -- The one current push-to-start token (app-wide: the same for every attributes type), when it was first
    -- registered and last sent again (even unchanged). The token it replaced is kept until
    -- `previous_token_until`, so a late 410 for it is matched to the installation. A token APNs refused
    -- (BadDeviceToken: not a token of this app's environment) is left out of starts until another is registered.
    push_to_start_token      text CONSTRAINT installations_push_to_start_token_valid CHECK (push_to_start_token ~ '^[0-9a-f]{64,200}$'),
    token_registered_at      timestamptz,
    token_seen_at            timestamptz,
    previous_token           text CONSTRAINT installations_previous_token_valid CHECK (previous_token ~ '^[0-9a-f]{64,200}$'),
    previous_token_until     timestamptz,
    token_refused_reason     text,
    token_refused_at         timestamptz,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    -- The last registration (PUT), whatever it changed.
    registered_at            timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT installations_installation_id_unique UNIQUE (app_id, installation_id),
    CONSTRAINT installations_app_id_unique UNIQUE (app_id, id),
    CONSTRAINT installations_push_to_start_token_unique UNIQUE (app_id, push_to_start_token),
    CONSTRAINT installations_os_version_parsed
        CHECK ((os_version IS NULL) = (os_major IS NULL) AND (os_major IS NULL OR (os_minor IS NOT NULL AND os_patch IS NOT NULL))),
    CONSTRAINT installations_token_complete
        CHECK ((push_to_start_token IS NULL) = (token_registered_at IS NULL) AND (push_to_start_token IS NULL) = (token_seen_at IS NULL)),
    CONSTRAINT installations_previous_token_complete CHECK ((previous_token IS NULL) = (previous_token_until IS NULL)),
    CONSTRAINT installations_token_refused_complete
        CHECK ((token_refused_reason IS NULL) = (token_refused_at IS NULL) AND (token_refused_reason IS NULL OR push_to_start_token IS NOT NULL))
);
-- Installation ids are looked up without an app by keys that serve every app (409 when two apps have one).
CREATE INDEX installations_by_installation_id ON installations (installation_id);
-- A late 410 names a token that was rotated away; the hourly prune finds tokens not seen for long.
CREATE INDEX installations_previous_token ON installations (app_id, previous_token) WHERE previous_token IS NOT NULL;
CREATE INDEX installations_token_seen ON installations (token_seen_at) WHERE push_to_start_token IS NOT NULL;

-- The Live Activities an installation runs, per the app's activity id. `token` activities carry their
-- update token (devices below iOS 18, or activities started without a channel); `channel` ones listen on
-- the event's channel and carry none. An activity that ended or was dismissed stays as a tombstone, so a
-- late token update of an ended activity cannot bring it back.
CREATE TABLE activities (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id           bigint NOT NULL,
    installation     bigint NOT NULL,
    activity_id      text NOT NULL CONSTRAINT activities_activity_id_valid
                         CHECK (activity_id <> '' AND length(activity_id) <= 200),
    event_id         bigint NOT NULL,
    attribute_type   text NOT NULL CONSTRAINT activities_attribute_type_valid
                         CHECK (attribute_type <> '' AND length(attribute_type) <= 200),
    push_type        text NOT NULL CONSTRAINT activities_push_type_valid CHECK (push_type IN ('token', 'channel')),
    push_token       text CONSTRAINT activities_push_token_valid CHECK (push_token ~ '^[0-9a-f]{64,200}$'),
    state            text NOT NULL CONSTRAINT activities_state_valid CHECK (state IN ('active', 'ended', 'dismissed')),
    token_seen_at    timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    ended_at         timestamptz,
    CONSTRAINT activities_installation_same_app FOREIGN KEY (app_id, installation)
        REFERENCES installations (app_id, id) ON DELETE CASCADE,
    CONSTRAINT activities_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id) ON DELETE CASCADE,
    CONSTRAINT activities_activity_id_unique UNIQUE (installation, activity_id),
    CONSTRAINT activities_token_only_for_token CHECK ((push_type = 'token') = (push_token IS NOT NULL)),
    CONSTRAINT activities_ended_complete CHECK ((state = 'active') = (ended_at IS NULL))
);
-- Mirroring: an event's active token activities, in keyset order (ActivityLifecycle.mirroredStates).
CREATE INDEX activities_mirrored ON activities (event_id, id) WHERE state IN ('active') AND push_type = 'token';
CREATE INDEX activities_by_event ON activities (event_id);
-- APNs' refusals name the token only.
CREATE INDEX activities_by_push_token ON activities (app_id, push_token) WHERE push_token IS NOT NULL;

-- What an installation follows: an event, or a topic (the same strings as events' `topics`).
CREATE TABLE follows (
    installation     bigint NOT NULL,
    app_id           bigint NOT NULL,
    event_id         bigint,
    topic            text CONSTRAINT follows_topic_valid CHECK (topic <> '' AND length(topic) <= 200),
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT follows_installation_same_app FOREIGN KEY (app_id, installation)
        REFERENCES installations (app_id, id) ON DELETE CASCADE,
    CONSTRAINT follows_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id) ON DELETE CASCADE,
    CONSTRAINT follows_one_target CHECK ((event_id IS NULL) <> (topic IS NULL))
);
-- One follow per target, and the audience of an event or a topic in installation order (keyset pages).
CREATE UNIQUE INDEX follows_event_unique ON follows (event_id, installation) WHERE event_id IS NOT NULL;
CREATE UNIQUE INDEX follows_topic_unique ON follows (app_id, topic, installation) WHERE topic IS NOT NULL;
CREATE INDEX follows_by_installation ON follows (installation);

-- Tokens APNs called invalid or wrong, and what Marquee did about them. `token` is cleared when its
-- installation is erased; `token_sha256` stays, so a token erased and seen again can still be recognised.
CREATE TABLE token_invalidations (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id             bigint NOT NULL REFERENCES apps (id) ON DELETE CASCADE,
    installation       bigint REFERENCES installations (id) ON DELETE SET NULL,
    token              text,
    token_sha256       bytea NOT NULL CONSTRAINT token_invalidations_token_sha256_valid CHECK (length(token_sha256) = 32),
    -- 'push_to_start' or 'activity'.
    token_kind         text NOT NULL CONSTRAINT token_invalidations_token_kind_valid CHECK (token_kind IN ('push_to_start', 'activity')),
    reason             text NOT NULL CONSTRAINT token_invalidations_reason_valid CHECK (reason <> '' AND length(reason) <= 100),
    -- APNs' timestamp of a 410, in milliseconds since 1970.
    apns_timestamp_ms  bigint,
    -- 'invalidated' (the token was removed), 'kept' (registered again after APNs' time), 'refused' (flagged,
    -- not removed), or 'unmatched' (no stored token had it).
    outcome            text NOT NULL CONSTRAINT token_invalidations_outcome_valid
                           CHECK (outcome IN ('invalidated', 'kept', 'refused', 'unmatched')),
    recorded_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX token_invalidations_by_installation ON token_invalidations (installation) WHERE installation IS NOT NULL;
CREATE INDEX token_invalidations_recorded ON token_invalidations (app_id, recorded_at);

