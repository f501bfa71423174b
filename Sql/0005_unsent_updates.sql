-- 0005_unsent_updates: an event that ends while no channel can carry its updates (never opened, refused,
-- or lost) is closed: its pending updates become 'unsent' and its outbox row goes, so the backlog drains
-- and every accepted update ends in a disposition that says what became of it.
ALTER TABLE updates DROP CONSTRAINT updates_disposition_valid;
ALTER TABLE updates ADD CONSTRAINT updates_disposition_valid
    CHECK (disposition IN ('pending', 'broadcast', 'conflated', 'superseded', 'unsent'));
