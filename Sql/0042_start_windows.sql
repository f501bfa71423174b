-- 0042_start_windows: a start is written once. A send window's new starts were inserted `sending`, one row with
-- four index entries each, and every answer then rewrote its row: two row versions, two WAL records and two page
-- writes per start. Now the window is marked by one row naming exactly the installations and tokens it sends
-- (`start_windows`, its elements in arrays), committed just before its requests are written, and each answer is
-- inserted into `starts` once, in its final state, in batches as the answers arrive; the last batch deletes the
-- window. A window left by a holder that is gone names the starts whose fate nobody knows: those without a row
-- become `unknown` (StartLifecycle's `holderLost`), and nothing else does.
--
-- Two runs of one event never mark the same installation: a window is marked under a transaction-scoped advisory
-- lock of its event (StartRepository.markWindow), which covers the "already started" read (`starts` went out, plus
-- the event's open windows) through the window's commit, and not the sends. A retry (a planned start) is still
-- marked in its row, `sending`, as before: retries are few.
--
-- Answers are inserts, so the table's pages are filled again (0036 left room on each for a HOT answer).
CREATE TABLE start_windows (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chunk_id bigint NOT NULL,
    run_id bigint NOT NULL,
    event_id bigint NOT NULL,
    audience_round integer NOT NULL,
    marked_at timestamptz NOT NULL,
    installations bigint[] NOT NULL,
    tokens text[] NOT NULL,
    os_majors integer[] NOT NULL,
    paths text[] NOT NULL,
    CONSTRAINT start_windows_elements_valid CHECK (
        cardinality(installations) > 0 AND cardinality(tokens) = cardinality(installations)
        AND cardinality(os_majors) = cardinality(installations) AND cardinality(paths) = cardinality(installations))
);
CREATE INDEX start_windows_by_event ON start_windows (event_id, audience_round);
CREATE INDEX start_windows_by_chunk ON start_windows (chunk_id);

ALTER TABLE starts SET (fillfactor = 100);

-- An installation erased while a window names it: the window keeps only its token's hash, as its start will.
CREATE OR REPLACE FUNCTION starts_forget_erased_tokens() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE starts s SET token = encode(sha256(convert_to(s.token, 'UTF8')), 'hex')
    FROM deleted_installations d WHERE s.installation = d.id;
    UPDATE start_windows w SET tokens = (
        SELECT array_agg(CASE WHEN e.installation IN (SELECT id FROM deleted_installations)
                              THEN encode(sha256(convert_to(e.token, 'UTF8')), 'hex') ELSE e.token END ORDER BY e.n)
        FROM unnest(w.installations, w.tokens) WITH ORDINALITY AS e (installation, token, n))
    WHERE w.installations && (SELECT array_agg(id) FROM deleted_installations);
    RETURN NULL;
END
$$;
