-- 0024_event_start_settings: what an event's push-to-start says and when its audience is started. An event
-- may carry its own audience lead (seconds before `starts_at`; NULL: serve's --audience-lead) and the alert
-- of its push-to-start (ActivityKit shows a started activity only with one; NULL: an automatic start run
-- of the event is skipped as `no_alert`). Both are domains, as the hot tables' single-column rules are
-- (0017): the ingest, which never assigns them, pays nothing for their checks.
CREATE DOMAIN audience_lead AS integer CONSTRAINT audience_lead_valid CHECK (VALUE BETWEEN 0 AND 604800);
ALTER TABLE events ADD COLUMN audience_lead audience_lead, ADD COLUMN start_alert json_object;
