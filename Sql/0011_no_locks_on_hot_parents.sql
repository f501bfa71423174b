-- 0011_no_locks_on_hot_parents: a foreign key check locks the row it finds (FOR KEY SHARE). Every ingest
-- checked the same api_keys row twice (updates.api_key_id, idempotency_keys.api_key_id) and every record
-- of a broadcast the same apps row (deliveries.app_id); concurrent transactions sharing a row lock make
-- PostgreSQL create a MultiXact for each new locker (SLRU pages and WAL of their own). Scripts/bench
-- service: 50,000 to 80,000 MultiXact members per 30,000 updates with these keys, none without, and ~10%
-- less PostgreSQL CPU. What each key guarded is kept another way:
-- * updates.api_key_id says which key sent an update. Keys are revoked, never deleted, except with their
--   app, whose events (and so updates) go too. Nothing looks updates up by key, so its index goes.
-- * idempotency_keys of an app's keys, and deliveries of an app, are deleted by AppRepository.remove in
--   the transaction that deletes the app (they were the cascade's).
ALTER TABLE updates DROP CONSTRAINT updates_api_key_id_fkey;
DROP INDEX updates_api_key;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_api_key_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_app_id_fkey;
