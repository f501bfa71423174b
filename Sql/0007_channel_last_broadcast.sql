-- 0007_channel_last_broadcast: when the last broadcast APNs accepted on each channel was sent, kept on the
-- channel. The dispatcher paces a channel at about one broadcast a second from this time; reading it from
-- the newest accepted 'broadcast' delivery cost a subquery per claimed row (and made the claim's plan hash
-- whole tables). Set together with last_aps_timestamp whenever a broadcast is recorded as accepted;
-- backfilled from the deliveries (their sent_at, the time of the record).
ALTER TABLE channels ADD COLUMN last_broadcast_at timestamptz;
UPDATE channels c SET last_broadcast_at = d.sent_at
FROM (SELECT channel_id, max(sent_at) AS sent_at FROM deliveries
      WHERE kind = 'broadcast' AND status = 200 AND channel_id IS NOT NULL GROUP BY channel_id) d
WHERE c.id = d.channel_id;
