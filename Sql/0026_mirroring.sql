-- 0026_mirroring: every broadcast of an event also goes, as device pushes, to the event's active `token`
-- activities (devices below iOS 18, or started without a channel). A pass sends the event's newest accepted
-- broadcast to every token activity behind it, in keyset chunks of activities that any instance claims
-- (SKIP LOCKED, a lease ended by the holder's heartbeat). Each activity keeps the aps.timestamp of the last
-- push APNs accepted for it, so a pass skips tokens already served, a newer broadcast during a pass reaches
-- the tokens still waiting, and a timestamp never goes back. There is no delivery row per push.
-- The priority-10 budget is counted per token: priority-10 pushes accepted since the window began (an hour).
ALTER TABLE activities ADD COLUMN mirrored_aps_timestamp bigint,
                       ADD COLUMN mirror_retry_at timestamptz,
                       ADD COLUMN mirror_failures integer NOT NULL DEFAULT 0,
                       ADD COLUMN high_priority_window_at timestamptz,
                       ADD COLUMN high_priority_count integer NOT NULL DEFAULT 0;

CREATE TABLE mirror_passes (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id                 bigint NOT NULL,
    event_id               bigint NOT NULL,
    -- The newest broadcast's aps.timestamp when the pass began (its chunks take the newest at their claim).
    started_aps_timestamp  bigint NOT NULL,
    -- When the ingest accepted that broadcast's update: the start of the mirroring lag.
    update_received_at     timestamptz,
    state                  text NOT NULL DEFAULT 'running' CONSTRAINT mirror_passes_state_valid CHECK (state IN ('running', 'done')),
    planned_through        bigint NOT NULL DEFAULT 0,
    planning_done          boolean NOT NULL DEFAULT false,
    created_at             timestamptz NOT NULL DEFAULT now(),
    finished_at            timestamptz,
    CONSTRAINT mirror_passes_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id) ON DELETE CASCADE
);
-- One pass at a time per event.
CREATE UNIQUE INDEX mirror_passes_one_running ON mirror_passes (event_id) WHERE state = 'running';
CREATE INDEX mirror_passes_finished ON mirror_passes (finished_at) WHERE state = 'done';

CREATE TABLE mirror_chunks (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pass_id           bigint NOT NULL REFERENCES mirror_passes (id) ON DELETE CASCADE,
    -- The activities (after, through] of the event.
    after_activity    bigint NOT NULL,
    through_activity  bigint NOT NULL,
    done              boolean NOT NULL DEFAULT false,
    claimed_by        text,
    claimed_until     timestamptz,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    attempts          integer NOT NULL DEFAULT 0,
    -- Progress, per chunk: pushes sent, accepted and failed.
    sent              integer NOT NULL DEFAULT 0,
    accepted          integer NOT NULL DEFAULT 0,
    failed            integer NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    CONSTRAINT mirror_chunks_range_valid CHECK (through_activity > after_activity)
) WITH (fillfactor = 70);
CREATE INDEX mirror_chunks_open ON mirror_chunks (next_attempt_at, id) WHERE NOT done;
CREATE INDEX mirror_chunks_by_pass ON mirror_chunks (pass_id) WHERE NOT done;
