-- 0028_audience_rounds: an event postponed after its start run went out starts its audience again, as a new
-- round. The event counts its rounds; a start run and each start belong to the round they were made in, so a new
-- round has an automatic run of its own and may start an installation the earlier round started (whose activity
-- the postponement ended). `postponed_at` and `postponed_end_update_id` name the last postponement and the end it
-- queued for the running activities: token activities registered after it are not sent that end by mirroring.
ALTER TABLE events ADD COLUMN audience_round integer NOT NULL DEFAULT 1,
                   ADD COLUMN postponed_at timestamptz,
                   ADD COLUMN postponed_end_update_id bigint;
ALTER TABLE start_runs ADD COLUMN audience_round integer NOT NULL DEFAULT 1;
ALTER TABLE starts ADD COLUMN audience_round integer NOT NULL DEFAULT 1;

DROP INDEX start_runs_one_automatic;
CREATE UNIQUE INDEX start_runs_one_automatic ON start_runs (event_id, audience_round) WHERE kind = 'automatic';
DROP INDEX starts_once_per_event;
CREATE UNIQUE INDEX starts_once_per_event ON starts (event_id, audience_round, installation) WHERE state IN ('sending', 'accepted', 'unknown');
