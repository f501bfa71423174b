-- 0010_hot_outbox_claims: a claim writes the channel it found into its outbox row (channel_id goes from
-- NULL to the channel), and the index on that column made every claim a non-HOT update: a new entry in
-- each of the table's indexes for every broadcast. No query looks rows up by channel_id; the index served
-- only the foreign key's ON DELETE CASCADE, and channel rows are deleted only with their app, whose
-- cascade reaches the outbox through events anyway (and the outbox is small: one row per event with work
-- pending). The foreign key stays; the index goes, so a claim rewrites its row in place.
DROP INDEX outbox_channel;
