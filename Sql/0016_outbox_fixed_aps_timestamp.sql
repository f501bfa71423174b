-- 0016_outbox_fixed_aps_timestamp: a claim fixes the aps.timestamp of the update it takes, before the send,
-- with the claim itself. A send repeated after a crash between APNs' answer and the record then carries
-- the same aps.timestamp, which the device ignores (before, the repeat took a new, later one and the device
-- showed it again, alert and all). `aps_timestamp_update_id` says which update it was fixed for: a claim
-- reuses it only for that update, and only while it is above the channel's recorded last one.
ALTER TABLE outbox ADD COLUMN aps_timestamp bigint CONSTRAINT outbox_aps_timestamp_valid CHECK (aps_timestamp > 0),
                   ADD COLUMN aps_timestamp_update_id bigint;
