-- 0017_hot_checks_as_domains: a table's CHECK constraints are read back from their stored text and compiled
-- for every statement that writes the table (PostgreSQL's ExecRelCheck: stringToNode and expression planning
-- of each one, per statement, for UPDATEs that leave the column alone too), and the tables written for every
-- update and broadcast had 44 of them. A domain's constraints are compiled once per connection (the type
-- cache), and checked only where a value is assigned to a column of the domain. So each single-column CHECK
-- of those six tables becomes the domain of its column, refusing the same values with the same SQLSTATE
-- (23514, check_violation); the checks that tie columns together stay on their tables. The ingest's and the
-- record's statements, looped in plpgsql on a throwaway cluster (six alternating runs each): about 325 µs per
-- update with the table CHECKs, 250 µs with these domains, 160 to 200 µs with no CHECK at all.
-- Done without rewriting a table: each column first takes a domain without constraints (a binary-coercible
-- change: the rows and most indexes are kept; the partial indexes whose predicate names a changed column are
-- built again), then the domains take their constraints, which scans the rows once to validate them (they
-- passed the same table CHECK, dropped in the same transaction).
CREATE DOMAIN json_object AS jsonb;
CREATE DOMAIN storage_policy AS text;
CREATE DOMAIN event_kind AS text;
CREATE DOMAIN event_status AS text;
CREATE DOMAIN external_id AS text;
CREATE DOMAIN channel_state AS text;
CREATE DOMAIN apns_channel_id AS text;
CREATE DOMAIN attempt_count AS integer;
CREATE DOMAIN aps_timestamp AS bigint;
CREATE DOMAIN update_action AS text;
CREATE DOMAIN update_disposition AS text;
CREATE DOMAIN update_priority AS text;
CREATE DOMAIN relevance_score AS double precision;
CREATE DOMAIN instance_name AS text;
CREATE DOMAIN idempotency_key AS text;
CREATE DOMAIN sha256_digest AS bytea;
CREATE DOMAIN http_status AS integer;
CREATE DOMAIN delivery_kind AS text;
CREATE DOMAIN duration_us AS bigint;
CREATE DOMAIN apns_priority AS smallint;
CREATE DOMAIN delivery_attempt AS integer;

ALTER TABLE events
    DROP CONSTRAINT events_attributes_valid, ALTER COLUMN attributes TYPE json_object,
    DROP CONSTRAINT events_external_id_valid, ALTER COLUMN external_id TYPE external_id,
    DROP CONSTRAINT events_kind_valid, ALTER COLUMN kind TYPE event_kind,
    DROP CONSTRAINT events_latest_state_valid, ALTER COLUMN latest_state TYPE json_object,
    DROP CONSTRAINT events_status_valid, ALTER COLUMN status TYPE event_status,
    DROP CONSTRAINT events_storage_policy_valid, ALTER COLUMN storage_policy TYPE storage_policy;
ALTER TABLE channels
    DROP CONSTRAINT channels_apns_channel_id_valid, ALTER COLUMN apns_channel_id TYPE apns_channel_id,
    DROP CONSTRAINT channels_attempts_valid, ALTER COLUMN attempts TYPE attempt_count,
    DROP CONSTRAINT channels_last_aps_timestamp_valid, ALTER COLUMN last_aps_timestamp TYPE aps_timestamp,
    DROP CONSTRAINT channels_state_valid, ALTER COLUMN state TYPE channel_state,
    DROP CONSTRAINT channels_storage_policy_valid, ALTER COLUMN storage_policy TYPE storage_policy;
ALTER TABLE updates
    DROP CONSTRAINT updates_action_valid, ALTER COLUMN action TYPE update_action,
    DROP CONSTRAINT updates_alert_valid, ALTER COLUMN alert TYPE json_object,
    DROP CONSTRAINT updates_content_state_valid, ALTER COLUMN content_state TYPE json_object,
    DROP CONSTRAINT updates_disposition_valid, ALTER COLUMN disposition TYPE update_disposition,
    DROP CONSTRAINT updates_priority_valid, ALTER COLUMN priority TYPE update_priority,
    DROP CONSTRAINT updates_relevance_score_valid, ALTER COLUMN relevance_score TYPE relevance_score;
ALTER TABLE outbox
    DROP CONSTRAINT outbox_aps_timestamp_valid, ALTER COLUMN aps_timestamp TYPE aps_timestamp,
    DROP CONSTRAINT outbox_attempts_valid, ALTER COLUMN attempts TYPE attempt_count,
    DROP CONSTRAINT outbox_claimed_by_valid, ALTER COLUMN claimed_by TYPE instance_name;
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_key_valid, ALTER COLUMN key TYPE idempotency_key,
    DROP CONSTRAINT idempotency_keys_request_hash_valid, ALTER COLUMN request_hash TYPE sha256_digest,
    DROP CONSTRAINT idempotency_keys_response_status_valid, ALTER COLUMN response_status TYPE http_status;
ALTER TABLE deliveries
    DROP CONSTRAINT deliveries_attempt_valid, ALTER COLUMN attempt TYPE delivery_attempt,
    DROP CONSTRAINT deliveries_kind_valid, ALTER COLUMN kind TYPE delivery_kind,
    DROP CONSTRAINT deliveries_latency_valid, ALTER COLUMN latency_us TYPE duration_us,
    DROP CONSTRAINT deliveries_priority_valid, ALTER COLUMN priority TYPE apns_priority,
    DROP CONSTRAINT deliveries_status_valid, ALTER COLUMN status TYPE http_status;

-- The same conditions as the table CHECKs they replace (0001, widened by 0005 for `unsent`).
ALTER DOMAIN json_object ADD CONSTRAINT json_object_valid CHECK (jsonb_typeof(VALUE) = 'object');
ALTER DOMAIN storage_policy ADD CONSTRAINT storage_policy_valid CHECK (VALUE IN ('none', 'mostRecent'));
ALTER DOMAIN event_kind ADD CONSTRAINT event_kind_valid CHECK (VALUE IN ('match', 'flight', 'other'));
ALTER DOMAIN event_status ADD CONSTRAINT event_status_valid
    CHECK (VALUE IN ('scheduled', 'live', 'ending', 'ended', 'cancelled'));
ALTER DOMAIN external_id ADD CONSTRAINT external_id_valid CHECK (VALUE <> '' AND length(VALUE) <= 200);
ALTER DOMAIN channel_state ADD CONSTRAINT channel_state_valid
    CHECK (VALUE IN ('planned', 'creating', 'create_unknown', 'create_failed', 'open', 'ending', 'ended', 'deleting',
                     'deleted', 'lost', 'unknown'));
ALTER DOMAIN apns_channel_id ADD CONSTRAINT apns_channel_id_valid CHECK (VALUE ~ '^[A-Za-z0-9+/]+={0,2}$');
ALTER DOMAIN attempt_count ADD CONSTRAINT attempt_count_valid CHECK (VALUE >= 0);
ALTER DOMAIN aps_timestamp ADD CONSTRAINT aps_timestamp_valid CHECK (VALUE > 0);
ALTER DOMAIN update_action ADD CONSTRAINT update_action_valid CHECK (VALUE IN ('update', 'end'));
ALTER DOMAIN update_disposition ADD CONSTRAINT update_disposition_valid
    CHECK (VALUE IN ('pending', 'broadcast', 'conflated', 'superseded', 'unsent'));
ALTER DOMAIN update_priority ADD CONSTRAINT update_priority_valid CHECK (VALUE IN ('auto', 'high', 'low'));
ALTER DOMAIN relevance_score ADD CONSTRAINT relevance_score_valid CHECK (VALUE >= 0 AND VALUE <> 'Infinity');
ALTER DOMAIN instance_name ADD CONSTRAINT instance_name_valid CHECK (VALUE <> '');
ALTER DOMAIN idempotency_key ADD CONSTRAINT idempotency_key_valid CHECK (length(VALUE) BETWEEN 1 AND 255);
ALTER DOMAIN sha256_digest ADD CONSTRAINT sha256_digest_valid CHECK (length(VALUE) = 32);
ALTER DOMAIN http_status ADD CONSTRAINT http_status_valid CHECK (VALUE BETWEEN 100 AND 599);
ALTER DOMAIN delivery_kind ADD CONSTRAINT delivery_kind_valid
    CHECK (VALUE IN ('broadcast', 'channel_create', 'channel_read', 'channel_delete', 'channel_list', 'push'));
ALTER DOMAIN duration_us ADD CONSTRAINT duration_us_valid CHECK (VALUE >= 0);
ALTER DOMAIN apns_priority ADD CONSTRAINT apns_priority_valid CHECK (VALUE IN (1, 5, 10));
ALTER DOMAIN delivery_attempt ADD CONSTRAINT delivery_attempt_valid CHECK (VALUE >= 1);
