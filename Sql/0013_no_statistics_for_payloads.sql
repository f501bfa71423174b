-- 0013_no_statistics_for_payloads: autovacuum analyzes the tables each update writes about once a minute
-- under load, and sorting a 30,000-row sample of each column is most of that work, above all for jsonb
-- (Scripts/bench service: 0.13 s of one core for `updates`, in the middle of the load). No query finds,
-- joins or sorts rows by these columns (the claim's `alert IS NOT NULL` looks at the few pending updates of
-- one event, found by index), so the planner has no use for their statistics: a target of 0 stops
-- PostgreSQL collecting them (ANALYZE of a 60,000-row table shaped like `updates`: 113 ms, 34 ms with these
-- two targets at 0).
ALTER TABLE updates ALTER COLUMN content_state SET STATISTICS 0,
                    ALTER COLUMN alert SET STATISTICS 0;
ALTER TABLE events ALTER COLUMN attributes SET STATISTICS 0,
                   ALTER COLUMN latest_state SET STATISTICS 0;
ALTER TABLE idempotency_keys ALTER COLUMN request_hash SET STATISTICS 0,
                             ALTER COLUMN response_body SET STATISTICS 0;
ALTER TABLE deliveries ALTER COLUMN apns_request_id SET STATISTICS 0,
                       ALTER COLUMN apns_unique_id SET STATISTICS 0,
                       ALTER COLUMN reason SET STATISTICS 0;
