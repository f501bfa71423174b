-- 0021_instance_heartbeats: claims end with their holder. A running `marquee serve` proves it is alive by
-- renewing its row here every second, for a few seconds ahead (`alive_until`), from a database connection
-- and a thread of its own. The dispatcher's claim on an outbox row (claimed_by, claimed_until: 0002) is free
-- to take at once when its holder's row has lapsed, not only when the claim's lease (120 s) runs out: after
-- a kill -9 and a restart, which gives the process a new name, the held channels go on within the TTL
-- instead of freezing for the lease. A holder with no row (a one-shot tool, `dispatchOnce`) keeps the lease
-- alone. A graceful stop lapses the row at once; the scheduler's hourly pass deletes rows lapsed a day ago.
-- Each renewal rewrites one small row, so the table leaves room on its page for HOT updates.
CREATE TABLE instance_heartbeats (
    instance     text PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    alive_until  timestamptz NOT NULL
) WITH (fillfactor = 50);
