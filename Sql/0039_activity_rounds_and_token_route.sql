-- 0039_activity_rounds_and_token_route: one activity per device per event, and an event without a channel still
-- reaching its token activities.
--
-- Activities: the audience round that was current when the activity was first registered (a start run leaves out
-- an installation with an activity of its round, whatever its state), whether a dismissal was the user's choice
-- (recorded while its round ran, before Marquee ended that round: it holds back every later start of the event),
-- and `pending` activities that iOS starts at their `start_date` (an app that schedules the event's activity ahead).
-- Rows from before this migration take the round their creation time implies (after the event's last postponement:
-- the current round) and a dismissal counts as the user's when it is of the current round of an event not over.
ALTER TABLE activities ADD COLUMN audience_round integer,
                       ADD COLUMN user_dismissed boolean NOT NULL DEFAULT false,
                       ADD COLUMN start_date timestamptz;
UPDATE activities a
SET audience_round = CASE WHEN e.postponed_at IS NOT NULL AND a.created_at <= e.postponed_at THEN e.audience_round - 1
                          ELSE e.audience_round END
FROM events e WHERE e.id = a.event_id;
UPDATE activities a SET user_dismissed = true
FROM events e
WHERE e.id = a.event_id AND a.state = 'dismissed' AND a.audience_round = e.audience_round AND e.status IN ('scheduled', 'live');
ALTER TABLE activities ALTER COLUMN audience_round SET NOT NULL,
    DROP CONSTRAINT activities_state_valid,
    ADD CONSTRAINT activities_state_valid CHECK (state IN ('active', 'pending', 'ended', 'dismissed')),
    DROP CONSTRAINT activities_ended_complete,
    ADD CONSTRAINT activities_ended_complete CHECK ((state IN ('active', 'pending')) = (ended_at IS NULL)),
    ADD CONSTRAINT activities_pending_has_start_date CHECK (state <> 'pending' OR start_date IS NOT NULL),
    ADD CONSTRAINT activities_dismissed_by_user CHECK (NOT user_dismissed OR state = 'dismissed');
-- Mirroring sends to active and pending token activities (ActivityLifecycle.mirroredStates; a pending one from its
-- start date on).
DROP INDEX activities_mirrored;
CREATE INDEX activities_mirrored ON activities (event_id, id) WHERE state IN ('active', 'pending') AND push_type = 'token';
-- The fan-out asks, per member, whether the installation has an activity of the event.
CREATE INDEX activities_by_installation_event ON activities (installation, event_id);

-- The token route: an event with no channel that broadcasts sends its updates to its token activities. The newest
-- state sent that way, one row per event: mirroring takes it to every token activity behind it, as it takes a
-- channel's broadcast. Its aps.timestamp continues the event's sequence across its channels (a channel that opens
-- later starts above it, and the route starts above the channels' last). `round_end_aps_timestamp`: the timestamp
-- the end of the event's last postponement went with, when it went this way (activities of the new round are
-- never sent it, nor anything older).
CREATE TABLE token_routes (
    event_id                 bigint PRIMARY KEY,
    app_id                   bigint NOT NULL,
    update_id                bigint NOT NULL,
    -- The update whose alert it carried: its own, or one it conflated (NULL: none).
    alert_update_id          bigint,
    aps_timestamp            bigint NOT NULL,
    priority                 smallint NOT NULL CONSTRAINT token_routes_priority_valid CHECK (priority IN (5, 10)),
    sent_at                  timestamptz NOT NULL,
    last_alert_at            timestamptz,
    -- When the ingest accepted the update (the start of the mirroring lag).
    update_received_at       timestamptz,
    round_end_aps_timestamp  bigint,
    CONSTRAINT token_routes_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id) ON DELETE CASCADE
);
