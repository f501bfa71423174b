-- 0035_installations_found_through_their_apps: an installation id is looked up without an app (a key that
-- serves every app) app by app, through installations_installation_id_unique (app_id, installation_id), so the
-- index of the ids alone goes. Every write of an installation paid for it: psql, 1,000,000 installations shaped
-- like the import's (random ids, a token each) in one statement (fast PostgreSQL, two runs each): 27.1 / 27.2 s
-- with it, 22.9 / 23.3 s without.
DROP INDEX installations_by_installation_id;
