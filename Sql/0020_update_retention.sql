-- 0020_update_retention: the updates of an event that ended long ago can go (serve --update-retention, 30
-- days by default), keeping what its counts need. The updates table gains a row per accepted update (86
-- million a day at 1,000 a second) and, unlike deliveries, had no retention. An ended event takes no more
-- updates, and its idempotency keys (24 h) are gone a day after it ended at the latest, so nothing reads its
-- updates again but its counts by disposition: those are kept in purged_update_counts and added to what is
-- left. events.updates_purged_at marks an event done; the partial index holds only the ended events not
-- purged yet, so the purge never walks the ones it has done. Neither column of its predicate changes on an
-- ingest, which keeps those updates of the event row HOT (an index on updated_at, which every ingest sets,
-- would not).
ALTER TABLE events ADD COLUMN updates_purged_at timestamptz;
CREATE INDEX events_to_purge ON events (id) WHERE status IN ('ended', 'cancelled') AND updates_purged_at IS NULL;
CREATE TABLE purged_update_counts (
    event_id    bigint PRIMARY KEY REFERENCES events (id) ON DELETE CASCADE,
    pending     integer NOT NULL DEFAULT 0,
    broadcast   integer NOT NULL DEFAULT 0,
    conflated   integer NOT NULL DEFAULT 0,
    superseded  integer NOT NULL DEFAULT 0,
    unsent      integer NOT NULL DEFAULT 0
);
