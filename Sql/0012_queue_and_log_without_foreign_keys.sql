-- 0012_queue_and_log_without_foreign_keys: every foreign key is checked by a query of its own (through SPI,
-- with a FOR KEY SHARE lock on the row it finds) after each statement that writes the referencing column.
-- The outbox (a work queue: one row per event, inserted by an ingest, claimed, deleted by the record of
-- its broadcast) and deliveries (an append-only log of APNs exchanges) paid five such checks per update:
-- outbox.event_id and outbox.update_id when an ingest inserts the row, outbox.channel_id when a claim
-- fills it in, deliveries.channel_id and deliveries.update_id for each broadcast. Each row they point at
-- was found or written by the same statement (the ingest updates the event and inserts the update; the
-- claim joins the channel; the record updates the channel and the update), so the checks guarded nothing
-- a statement could get wrong, only the cascades. Events, channels and updates are deleted only with their
-- app, and AppRepository.remove deletes the app's outbox rows and deliveries in the same transaction.
-- updates.event_id stays: the history of an event keeps its link, and its cascade.
ALTER TABLE outbox DROP CONSTRAINT outbox_event_id_fkey,
                   DROP CONSTRAINT outbox_channel_id_fkey,
                   DROP CONSTRAINT outbox_update_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_channel_id_fkey,
                       DROP CONSTRAINT deliveries_update_id_fkey;
-- Only the foreign key's ON DELETE SET NULL looked deliveries up by update.
DROP INDEX deliveries_update;
