-- 0031_start_acceptance_per_chunk: the time of a run's last accepted start is kept on its chunks while they
-- run. Every written batch of answers moved `start_runs.last_accepted_at`, so each one took the run's row lock
-- and held it through its commit: the batches of a kick-off waited on each other's WAL flush and on the run
-- step (which holds the run's row while it cuts chunks). A chunk's row has one holder; its time is folded
-- into the run's when the chunk is done, and a run's last acceptance is the latest of its own and its open
-- chunks'.
ALTER TABLE start_chunks ADD COLUMN last_accepted_at timestamptz;
