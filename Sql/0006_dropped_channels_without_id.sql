-- 0006_dropped_channels_without_id: a channel that was never created at APNs ('planned', or its create
-- failed) goes straight to 'deleted' when its event ends (ChannelLifecycle.endRequested), so a deleted
-- channel may have no APNs id. 0001's channels_has_id refused that move.
ALTER TABLE channels DROP CONSTRAINT channels_has_id;
ALTER TABLE channels ADD CONSTRAINT channels_has_id
    CHECK (state IN ('planned', 'creating', 'create_unknown', 'create_failed', 'deleted') OR apns_channel_id IS NOT NULL);
