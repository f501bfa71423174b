-- 0030_freshness_policies: what every broadcast and device push of an event carries besides its state (issue 26):
-- `staleAfter` (a stale-date that many seconds after each update is sent, so a silent feed shows as stale),
-- `relevanceScore` with an `alertBoost` for `alertBoostSeconds` after an alert, and `dismissAfter` (the default
-- dismissal after an end). The members are FreshnessPolicy's (MarqueeCore), which validates them; unset ones fall
-- back from the event's to its attribute type's policy to Marquee's defaults.
--
-- An attribute type never changes (devices decode its shape) but its policy may: one row per type, replaced by
-- `PUT /v1/attribute-types/{name}/policy`, with the key that set it (no foreign key, as on updates: 0011).
CREATE TABLE attribute_type_policies (
    attribute_type_id  bigint PRIMARY KEY REFERENCES attribute_types (id) ON DELETE CASCADE,
    freshness          jsonb NOT NULL CONSTRAINT attribute_type_policies_freshness_valid CHECK (jsonb_typeof(freshness) = 'object'),
    api_key_id         bigint,
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- An event's own members, over its type's (NULL: none). events is written for every update, so the rule is a
-- domain (0017).
ALTER TABLE events ADD COLUMN freshness json_object;

-- When the channel's last broadcast with an alert was accepted: the alert boost lasts alertBoostSeconds from it.
ALTER TABLE channels ADD COLUMN last_alert_at timestamptz;
