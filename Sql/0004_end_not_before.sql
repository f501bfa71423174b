-- 0004_end_not_before: `POST /v1/events/{id}/end` with `at`: the end broadcast is not sent before it.
-- The time is kept on the update (what was asked) and on the event's outbox row (what dispatchers
-- check when they claim). It is a column of its own rather than next_attempt_at, because a dispatcher
-- that releases a row (pacing, retries, a newer update arriving during a send) rewrites next_attempt_at.
ALTER TABLE updates ADD COLUMN not_before timestamptz;
ALTER TABLE outbox ADD COLUMN not_before timestamptz;
