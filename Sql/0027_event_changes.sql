-- 0027_event_changes: every change of an event after its creation (new times, topics, audience lead or start
-- alert; a postponement; a cancel), with the API key that made it and what changed: {"field": {"from": ..,
-- "to": ..}}. The kind is the EventLifecycle event performed. The key is no foreign key, as on updates (0011): a
-- deleted key leaves its record behind.
CREATE TABLE event_changes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    app_id      bigint NOT NULL,
    event_id    bigint NOT NULL,
    api_key_id  bigint,
    kind        text NOT NULL CONSTRAINT event_changes_kind_valid CHECK (kind IN ('rescheduled', 'postponed', 'cancelRequested')),
    changes     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT event_changes_event_same_app FOREIGN KEY (app_id, event_id) REFERENCES events (app_id, id) ON DELETE CASCADE
);
CREATE INDEX event_changes_by_event ON event_changes (event_id, id);
