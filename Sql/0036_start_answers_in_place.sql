-- 0036_start_answers_in_place: APNs' answer to a start (`sending` to `accepted` or `unknown`) is written in
-- place, as a HOT update, instead of as a new row version with an entry in each of the four indexes. An update
-- is HOT only when no indexed column changes value, and a column named in an index predicate counts: the two
-- partial indexes of the started states named `state`, which every answer changes. They now name `went_out`,
-- generated from `state` (StartLifecycle.startedStates: the push went out, or may have), which an answer
-- leaves as it is. A HOT update also needs room on the row's page: a send window's starts are inserted
-- together and answered together in one statement, so every row of a page is rewritten while its old version
-- is still live: a row with a token of 64 hex digits takes about 195 bytes when sent and 221 answered, so a page takes
-- 18 rows at insert and holds their new versions too.
ALTER TABLE starts SET (fillfactor = 45);
ALTER TABLE starts ADD COLUMN went_out boolean NOT NULL GENERATED ALWAYS AS (state IN ('sending', 'accepted', 'unknown')) STORED;

DROP INDEX starts_once_per_event;
CREATE UNIQUE INDEX starts_once_per_event ON starts (event_id, audience_round, installation) WHERE went_out;
DROP INDEX starts_by_installation;
CREATE INDEX starts_by_installation ON starts (installation, sent_at) WHERE went_out;
