-- 0018_small_statistics_samples: ANALYZE reads a sample of 300 rows per unit of the largest statistics target
-- among a table's columns: 30,000 rows at the default target of 100. The three tables that gain a row per
-- update or broadcast (updates, deliveries, idempotency_keys) are analyzed by autovacuum about once a minute
-- while they are young, and those three analyses were most of autovacuum's CPU in the middle of the load
-- (Scripts/bench service with SERVICE_BENCH_PG_STATS: 0.05, 0.09 and 0.07 s of one core at 60,000 rows,
-- taken from the serving backends on a 2-core machine). Their queries find rows through indexes by id, key,
-- event, channel or time, and a target of 10 (a 3,000-row sample, histograms of 10 buckets) keeps those
-- plans: ANALYZE of the three at 69,000 rows each took 250 to 300 ms, 40 ms with these targets.
-- (The payload columns already have a target of 0, from 0013.)
ALTER TABLE updates
    ALTER COLUMN id SET STATISTICS 10, ALTER COLUMN event_id SET STATISTICS 10,
    ALTER COLUMN api_key_id SET STATISTICS 10, ALTER COLUMN action SET STATISTICS 10,
    ALTER COLUMN stale_date SET STATISTICS 10, ALTER COLUMN dismissal_date SET STATISTICS 10,
    ALTER COLUMN relevance_score SET STATISTICS 10, ALTER COLUMN priority SET STATISTICS 10,
    ALTER COLUMN occurred_at SET STATISTICS 10, ALTER COLUMN received_at SET STATISTICS 10,
    ALTER COLUMN disposition SET STATISTICS 10, ALTER COLUMN disposed_at SET STATISTICS 10,
    ALTER COLUMN not_before SET STATISTICS 10;
ALTER TABLE deliveries
    ALTER COLUMN id SET STATISTICS 10, ALTER COLUMN app_id SET STATISTICS 10,
    ALTER COLUMN kind SET STATISTICS 10, ALTER COLUMN channel_id SET STATISTICS 10,
    ALTER COLUMN update_id SET STATISTICS 10, ALTER COLUMN status SET STATISTICS 10,
    ALTER COLUMN latency_us SET STATISTICS 10, ALTER COLUMN priority SET STATISTICS 10,
    ALTER COLUMN attempt SET STATISTICS 10, ALTER COLUMN aps_timestamp SET STATISTICS 10,
    ALTER COLUMN sent_at SET STATISTICS 10;
ALTER TABLE idempotency_keys
    ALTER COLUMN api_key_id SET STATISTICS 10, ALTER COLUMN key SET STATISTICS 10,
    ALTER COLUMN response_status SET STATISTICS 10, ALTER COLUMN created_at SET STATISTICS 10,
    ALTER COLUMN expires_at SET STATISTICS 10, ALTER COLUMN update_id SET STATISTICS 10;
