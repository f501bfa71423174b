-- 0019_idempotency_key_written_with_its_update: an ingest writes its idempotency key once, in the statement
-- that stores the update, already pointing at it. A key that is there (another request's, or an earlier try
-- of this one) fails that statement on the primary key (23505, `idempotency_keys_pkey`), so nothing of it
-- stays, and the ingest answers from the stored key; a request that waits for the key's first transaction
-- gets that answer once it commits. Before, every ingest took its key in a statement of its own (INSERT …
-- ON CONFLICT, pointing nowhere yet), pointed it at the update in a second write of the row, and deleted it
-- again when the event refused: two writes of the row, a CHECK, and a statement more per ingest.
-- A key never points nowhere now. Keys without an update are the answers stored before 0008 (24 h keys,
-- long expired) and none else: a refused request deleted its key in its own transaction. They go, with
-- the columns that held those answers.
DELETE FROM idempotency_keys WHERE update_id IS NULL;
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_response_complete,
    DROP COLUMN response_status,
    DROP COLUMN response_body,
    ALTER COLUMN update_id SET NOT NULL;
