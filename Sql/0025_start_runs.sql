-- 0025_start_runs: push-to-start fan-outs. A run starts an event's audience (automatic at the audience
-- lead, or manual); its audience is cut into keyset chunks of installations that any instance claims
-- (SKIP LOCKED, with a lease that ends with its holder's heartbeat, as the outbox's), and every start is one
-- row per (run, installation, token), written just before it is sent. A run's state names come from
-- MarqueeCore's StartRunState, a start's from StartState (StartLifecycle).

CREATE TABLE start_runs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id              bigint NOT NULL,
    event_id            bigint NOT NULL,
    kind                text NOT NULL CONSTRAINT start_runs_kind_valid CHECK (kind IN ('automatic', 'manual')),
    state               text NOT NULL CONSTRAINT start_runs_state_valid
                            CHECK (state IN ('running', 'rolling', 'done', 'skipped', 'stopped')),
    skip_reason         text CONSTRAINT start_runs_skip_reason_valid CHECK (skip_reason IN ('late', 'no_alert')),
    -- A manual run's topic filter (NULL: the event's direct followers and every topic of the event).
    topics              text[],
    -- A manual run's alert (NULL: the event's start_alert).
    alert               json_object,
    due_at              timestamptz NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT now(),
    -- iOS 18 installations wait for the event's channel until then, and are then started with input-push-token.
    channel_wait_until  timestamptz NOT NULL,
    -- The followers counted when the run began, for the ETA.
    estimated_audience  bigint NOT NULL DEFAULT 0,
    -- The pass over the audience (1: the first; later ones start late followers) and how far it has cut chunks.
    pass                integer NOT NULL DEFAULT 1,
    planned_through     bigint NOT NULL DEFAULT 0,
    planning_done       boolean NOT NULL DEFAULT false,
    next_pass_at        timestamptz,
    first_pass_done_at  timestamptz,
    last_accepted_at    timestamptz,
    finished_at         timestamptz,
    created_by          text,
    CONSTRAINT start_runs_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id) ON DELETE CASCADE,
    CONSTRAINT start_runs_skipped_has_reason CHECK ((state = 'skipped') = (skip_reason IS NOT NULL))
);
-- One automatic run per event, however many instances see it due.
CREATE UNIQUE INDEX start_runs_one_automatic ON start_runs (event_id) WHERE kind = 'automatic';
CREATE INDEX start_runs_open ON start_runs (id) WHERE state IN ('running', 'rolling');
CREATE INDEX start_runs_by_event ON start_runs (event_id, id);

CREATE TABLE start_chunks (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id                bigint NOT NULL REFERENCES start_runs (id) ON DELETE CASCADE,
    pass                  integer NOT NULL,
    -- The installations (after, through] of the run's audience.
    after_installation    bigint NOT NULL,
    through_installation  bigint NOT NULL,
    done                  boolean NOT NULL DEFAULT false,
    claimed_by            text,
    claimed_until         timestamptz,
    next_attempt_at       timestamptz NOT NULL DEFAULT now(),
    attempts              integer NOT NULL DEFAULT 0,
    created_at            timestamptz NOT NULL DEFAULT now(),
    finished_at           timestamptz,
    CONSTRAINT start_chunks_range_valid CHECK (through_installation > after_installation)
) WITH (fillfactor = 70);
CREATE INDEX start_chunks_open ON start_chunks (next_attempt_at, id) WHERE NOT done;
CREATE INDEX start_chunks_by_run ON start_chunks (run_id, pass) WHERE NOT done;

CREATE TABLE starts (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id           bigint NOT NULL REFERENCES start_runs (id) ON DELETE CASCADE,
    app_id           bigint NOT NULL,
    event_id         bigint NOT NULL,
    installation     bigint NOT NULL,
    -- The push-to-start token it went (or would have gone) to.
    token            text NOT NULL CONSTRAINT starts_token_valid CHECK (token ~ '^[0-9a-f]{64,200}$'),
    os_major         integer,
    -- 'channel' (input-push-channel), 'plain' (iOS 17.x) or 'token' (input-push-token: no channel).
    path             text CONSTRAINT starts_path_valid CHECK (path IN ('channel', 'plain', 'token')),
    state            text NOT NULL CONSTRAINT starts_state_valid
                         CHECK (state IN ('planned', 'sending', 'accepted', 'rejected', 'unknown', 'skipped')),
    -- APNs' reason of a rejection, or why the run skipped it.
    reason           text CONSTRAINT starts_reason_valid CHECK (length(reason) <= 200),
    status           integer,
    attempts         integer NOT NULL DEFAULT 0,
    -- A planned start sent again after an answer that proved APNs did nothing, not before this.
    next_attempt_at  timestamptz,
    sent_at          timestamptz,
    answered_at      timestamptz,
    apns_unique_id   uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT starts_installation_same_app FOREIGN KEY (app_id, installation) REFERENCES installations (app_id, id) ON DELETE CASCADE,
    CONSTRAINT starts_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id) ON DELETE CASCADE
);
-- No installation is started twice for one event, by any run (StartLifecycle.startedStates).
CREATE UNIQUE INDEX starts_once_per_event ON starts (event_id, installation) WHERE state IN ('sending', 'accepted', 'unknown');
-- A run tries a token once; a newer token of the same installation may go once more.
CREATE UNIQUE INDEX starts_once_per_token ON starts (run_id, installation, token);
-- The per-device limit and the concurrency cap: an installation's recent starts.
CREATE INDEX starts_by_installation ON starts (installation, sent_at) WHERE state IN ('sending', 'accepted', 'unknown');
