-- 0015_outbox_without_vacuum_truncation: the outbox is a queue, its rows inserted, claimed and deleted within
-- about a second, so its last pages are often empty when autovacuum comes by, and vacuum then truncates the
-- table. Truncation takes an ACCESS EXCLUSIVE lock on it, which every ingest (it inserts the outbox row) and
-- every claim wait behind: under Scripts/bench service, 84 of 185 pages removed and 202s stalled for up to
-- 127 ms while it held the lock. The pages are reused by the next inserts anyway; vacuum keeps them.
ALTER TABLE outbox SET (vacuum_truncate = false);
