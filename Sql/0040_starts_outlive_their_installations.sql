-- 0040_starts_outlive_their_installations: a start was deleted with its installation (the cascade of
-- starts_installation_same_app), so erasing an installation took its start out of the counts of the run that
-- started it: a rolling run's counts shrank, and its chunks' kept counts too when the run ended and counted them
-- again. docs/api.md promises that an installation deleted after its start still counts in the run that started
-- it. The start now outlives its installation, and keeps nothing of it that could name a device: the erasure
-- replaces its token with the token's SHA-256 (64 hex digits, as a token is), as token refusals keep only a hash.
-- Starts went with their installations when an app was removed too: AppRepository.remove deletes them itself.
ALTER TABLE starts DROP CONSTRAINT starts_installation_same_app;

CREATE FUNCTION starts_forget_erased_tokens() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE starts s SET token = encode(sha256(convert_to(s.token, 'UTF8')), 'hex')
    FROM deleted_installations d WHERE s.installation = d.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER installations_leave_their_starts_anonymous
    AFTER DELETE ON installations REFERENCING OLD TABLE AS deleted_installations
    FOR EACH STATEMENT EXECUTE FUNCTION starts_forget_erased_tokens();
