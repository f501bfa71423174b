-- The device-token CHECKs of 0023 and 0025 spelled the rule as one bounded repetition, '^[0-9a-f]{64,200}$'.
-- PostgreSQL's regex engine expands such a bound into a large automaton and runs it per row: about 50 µs a
-- token, which made it the largest cost of writing a million installations (an import) or a million starts
-- (a kick-off). The same rule as a length range and a character class costs under 1 µs.
ALTER TABLE installations
    DROP CONSTRAINT installations_push_to_start_token_valid,
    ADD CONSTRAINT installations_push_to_start_token_valid
        CHECK (length(push_to_start_token) BETWEEN 64 AND 200 AND push_to_start_token !~ '[^0-9a-f]'),
    DROP CONSTRAINT installations_previous_token_valid,
    ADD CONSTRAINT installations_previous_token_valid
        CHECK (length(previous_token) BETWEEN 64 AND 200 AND previous_token !~ '[^0-9a-f]');

ALTER TABLE activities
    DROP CONSTRAINT activities_push_token_valid,
    ADD CONSTRAINT activities_push_token_valid CHECK (length(push_token) BETWEEN 64 AND 200 AND push_token !~ '[^0-9a-f]');

ALTER TABLE starts
    DROP CONSTRAINT starts_token_valid,
    ADD CONSTRAINT starts_token_valid CHECK (length(token) BETWEEN 64 AND 200 AND token !~ '[^0-9a-f]');
