-- 0034_follows_without_event_check: a follow's foreign key to its event is checked by a query of its own per
-- inserted row, and an import's million follows of one match all lock that one event row (FOR KEY SHARE).
-- psql, 1,000,000 follows of one event inserted in one statement (fast PostgreSQL, two runs each): both keys
-- 10.3 / 9.5 s, the installation's key alone 7.0 / 6.6 s, none 3.2 s. The event of a follow is resolved among
-- its app's events in the same transaction that inserts it (InstallationRepository.changeFollows, the
-- import's named events), and the key's cascade is done another way: an event is deleted only with its app,
-- whose installations go with it, and their follows by the key to installations kept here (0032 made the
-- same change for starts).
ALTER TABLE follows DROP CONSTRAINT follows_event_same_app;
