-- 0032_starts_without_shared_parent_checks: a start's foreign keys to its run and to its event point at rows that
-- every start of a kick-off shares (0011 and 0012 did the same for the broadcast path). Each is checked by a
-- query of its own per inserted start, which locks the shared row (FOR KEY SHARE; a MultiXact for every
-- concurrent locker, and the fan-out's chunks insert concurrently). Inserting 300,000 rows shaped like starts
-- took 2.5 to 2.8 s with no key, 3.5 to 4.4 s with the installation's key alone and 5.3 to 6.3 s with all three.
-- The run and the event of a start are its claimed chunk's, so the references hold by construction. What their
-- cascades did is done another way:
-- * a run is deleted only by StartRepository.purge, after its starts;
-- * an event is deleted only with its app, whose installations go with it, and their starts by the key to
--   installations kept here.
ALTER TABLE starts DROP CONSTRAINT starts_run_id_fkey,
                   DROP CONSTRAINT starts_event_same_app;
