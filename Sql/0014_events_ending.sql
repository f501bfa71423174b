-- 0014_events_ending: the scheduler's sweep looks for ending events that no channel can end (every tick,
-- 5 s by default); without an index of their own that read was a scan of the whole `events` table, whose
-- live rows take their state on every update and so fill many pages. Ending events are few and a row
-- enters or leaves this index only when its status changes, so the updates' writes of the latest state
-- stay HOT.
CREATE INDEX events_ending ON events (id) WHERE status = 'ending';
