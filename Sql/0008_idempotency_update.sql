-- 0008_idempotency_update: an idempotency key points at the update its request stored instead of
-- keeping a copy of the answer. Ingest sends the key, the update, the event's latest state and its
-- outbox row in one round trip (a pipeline that runs as one implicit transaction), before the answer
-- exists; a replay rebuilds the answer from the update row (its id, times and the disposition it had at
-- ingest), byte for byte. A key left with neither update_id nor a stored answer belongs to a request
-- that was refused, and the next request with that key takes it over.
-- No foreign key on purpose: checking it (and a cascade when an event is deleted) would need another
-- index written on every ingest; a key whose update is gone (its event was deleted) answers 404.
-- response_status and response_body stay for keys stored before this migration.
ALTER TABLE idempotency_keys ADD COLUMN update_id bigint;
