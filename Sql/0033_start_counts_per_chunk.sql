-- 0033_start_counts_per_chunk: a run's report (GET /v1/events/{id}/starts, `marquee event starts --follow`) counted
-- every start of the run by state, reason and path on each read: 217 ms a read at 900,000 starts, and 16 of the
-- 72 s PostgreSQL spent on a million-follower kick-off under Scripts/bench fanout, which reads it once a second as
-- --follow does. A chunk's starts are settled when it is done, so its counts are kept then (`counts`, the groups
-- of the starts it wrote: in its range, of its run, created since the chunk was cut); the report adds those of
-- done chunks to a count of the open ones' starts.
ALTER TABLE start_chunks ADD COLUMN counts jsonb;
CREATE INDEX start_chunks_of_run ON start_chunks (run_id);
