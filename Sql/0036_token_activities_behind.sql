-- 0036_token_activities_behind: mirroring looks every second, on every instance, for events with a token
-- activity behind the event's newest broadcast. Through activities_mirrored (event_id, id) that read every token
-- activity of each event broadcast within the day to find none behind: 28 ms a call for 18,000 activities under
-- Scripts/bench fanout, growing with the audience. Keyed by the last mirrored aps.timestamp, the activities behind
-- are one index range, empty once a pass is done. The price: a mirrored answer changes an indexed column, so its
-- update is no longer HOT.
CREATE INDEX activities_behind ON activities (event_id, (coalesce(mirrored_aps_timestamp, 0)))
    WHERE state IN ('active') AND push_type = 'token';
