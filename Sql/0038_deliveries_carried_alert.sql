-- 0038_deliveries_carried_alert: the update whose alert a broadcast carried. A broadcast carries the alert of an
-- update it conflates when its own update has none (BroadcastClaimPlanner), and mirroring sends the token
-- activities what the channel's newest broadcast carried, so it reads the alert from this update. NULL: the
-- broadcast carried no alert, or was recorded before this column (mirroring then reads the broadcast update's
-- own alert). No foreign key: deliveries are a log (0012).
-- A small statistics target, as every column of this table has (0018).
ALTER TABLE deliveries ADD COLUMN alert_update_id bigint;
ALTER TABLE deliveries ALTER COLUMN alert_update_id SET STATISTICS 10;
