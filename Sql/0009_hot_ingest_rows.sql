-- 0009_hot_ingest_rows: every ingest rewrites its event's row and its outbox row. PostgreSQL can do that
-- in place (a HOT update: no new index entries, no index bloat for later lookups to wade through) only
-- when no indexed column changes, and latest_update_id and update_id change every time.
-- * events.latest_update_id: its index served only the foreign key's ON DELETE SET NULL. Updates are
--   deleted only with their event (or app), so the key guarded nothing; both go.
-- * outbox.update_id: the foreign key stays (its cascade scans the outbox, one row per event with work
--   pending, so a small table); its index goes.
-- Free space on each page leaves room for the new row versions of HOT updates.
ALTER TABLE events DROP CONSTRAINT events_latest_update_fk;
DROP INDEX events_latest_update;
DROP INDEX outbox_update;
ALTER TABLE events SET (fillfactor = 80);
ALTER TABLE outbox SET (fillfactor = 50);
