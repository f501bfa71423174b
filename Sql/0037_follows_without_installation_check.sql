-- 0037_follows_without_installation_check: a follow's foreign key to its installation was checked by a query of
-- its own per inserted row, which also locked that installation row (FOR KEY SHARE): a row version and a WAL
-- record per follow. psql, 1,000,000 follows of one event, one statement, fast PostgreSQL on a slow spell of the
-- 2-core machine: 27.3 s with the key, 10.8 s without. Every writer of follows holds its installation already:
-- the API locks the row (InstallationRepository.changeFollows), and the import inserts or updates it in the
-- same transaction. The key's other job, taking an installation's follows with it when it is deleted (by
-- erase, or by an app's removal through installations' own key to apps), is done by a statement trigger that
-- reads the deleted rows once per statement.
ALTER TABLE follows DROP CONSTRAINT follows_installation_same_app;

CREATE FUNCTION follows_go_with_their_installations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM follows f USING deleted_installations d WHERE f.installation = d.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER installations_take_their_follows
    AFTER DELETE ON installations REFERENCING OLD TABLE AS deleted_installations
    FOR EACH STATEMENT EXECUTE FUNCTION follows_go_with_their_installations();
