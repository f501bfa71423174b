// The token route (Sql/0039): an event with no channel that broadcasts still reaches its token activities (started
// before its channel opened, on a channel the quota refused, or on devices below iOS 18). Its outbox work is taken
// here instead of by the dispatcher, which claims only events whose channel broadcasts: one statement stamps the
// event's newest state with the next aps.timestamp of the event's sequence (above its channels' last and its own),
// records it in `token_routes`, disposes the updates as a broadcast would (the newest `broadcast`, older pending ones
// `conflated`), ends an ending event, and drops the outbox row. Mirroring then takes that state to every token
// activity behind it, as it takes a channel's broadcast. No APNs request is made here, so there is no lease: the row
// locks of the one statement are the claim.
import Foundation
import MarqueeCore
import Postgres

/// The outbox work of events delivered to their token activities.
public struct TokenRouteRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Takes up to `limit` due outbox rows of events that have no broadcasting channel (and no lost one) and have a
    /// token activity to reach, at most one a `pacing` seconds per event unless an urgent update waits (an end, an
    /// alert, priority `high`), and records each as sent on the token route. Returns the events taken.
    @discardableResult
    public func sendDue(limit: Int = 100, pacing: TimeInterval = 1, now: Date? = nil) async throws -> [Int] {
        try await pool.query(Self.sendDueStatement(limit: limit, pacing: pacing, now: now)).map { try $0.decode(Int.self, column: "event_id") }
    }

    /// The event has a token activity that a token-route send reaches (active, or pending).
    static func hasTokenActivity(eventID: PostgresQuery) -> PostgresQuery {
        """
        EXISTS (SELECT 1 FROM activities a WHERE a.event_id = \(fragment: eventID) AND a.state IN \(ActivityLifecycle.mirroredStates.sql)
                AND a.push_type = \(ActivityPushType.token.sql))
        """
    }

    private static let eventStatusAfterEnd = EventLifecycle.sqlStatus(after: .endBroadcast, column: "e.status")

    static func sendDueStatement(limit: Int, pacing: TimeInterval, now: Date?) -> PostgresQuery {
        let pending = UpdateDisposition.pending.sql
        return """
            WITH due AS (
                SELECT o.id, o.event_id, o.update_id, e.app_id, e.postponed_end_update_id
                FROM outbox o JOIN events e ON e.id = o.event_id
                WHERE o.next_attempt_at <= coalesce(\(now), now())
                  AND (o.not_before IS NULL OR o.not_before <= coalesce(\(now), now()))
                  AND (o.claimed_until IS NULL OR o.claimed_until <= coalesce(\(now), now())
                       OR o.claimed_by = ANY (\(fragment: InstanceHeartbeatRepository.lapsedInstances(now: now))))
                  AND NOT e.channel_lost
                  AND NOT EXISTS (SELECT 1 FROM channels c WHERE c.event_id = o.event_id
                                  AND c.state IN \(ChannelLifecycle.broadcastingStates.sql))
                  AND \(fragment: hasTokenActivity(eventID: "o.event_id"))
                  AND (NOT EXISTS (SELECT 1 FROM token_routes t WHERE t.event_id = o.event_id
                                   AND t.sent_at > coalesce(\(now), now()) - make_interval(secs => \(pacing)::float8))
                       OR EXISTS (SELECT 1 FROM updates p WHERE p.event_id = o.event_id AND p.disposition = \(pending) AND p.id <= o.update_id
                                  AND (p.priority = \(RequestedPriority.high.sql) OR p.alert IS NOT NULL OR p.action = \(UpdateAction.end.sql))))
                ORDER BY o.next_attempt_at, o.id
                LIMIT \(limit)
                FOR UPDATE OF o SKIP LOCKED
            ), sent AS (
                -- An update whose row this statement's snapshot cannot see yet (an ingest committed it meanwhile) drops
                -- out of the join: its outbox row stays for the next call.
                SELECT d.*, u.action, u.received_at,
                       CASE WHEN u.alert IS NOT NULL THEN u.id
                            ELSE (SELECT max(p.id) FROM updates p WHERE p.event_id = d.event_id AND p.disposition = \(pending)
                                  AND p.id < d.update_id AND p.alert IS NOT NULL) END AS alert_update_id,
                       greatest(floor(extract(epoch FROM coalesce(\(now), now())))::bigint,
                                (SELECT t.aps_timestamp + 1 FROM token_routes t WHERE t.event_id = d.event_id),
                                (SELECT max(c.last_aps_timestamp) + 1 FROM channels c WHERE c.event_id = d.event_id)) AS aps_timestamp,
                       CASE WHEN u.action = \(UpdateAction.end.sql) OR u.priority = \(RequestedPriority.high.sql)
                                 OR EXISTS (SELECT 1 FROM updates p WHERE p.event_id = d.event_id AND p.disposition = \(pending)
                                            AND p.id <= d.update_id AND (p.alert IS NOT NULL OR p.priority = \(RequestedPriority.high.sql)))
                            THEN 10 ELSE 5 END AS priority
                FROM due d JOIN updates u ON u.id = d.update_id
            ), stamped AS (
                INSERT INTO token_routes AS t (event_id, app_id, update_id, alert_update_id, aps_timestamp, priority, sent_at, last_alert_at,
                                               update_received_at, round_end_aps_timestamp)
                SELECT event_id, app_id, update_id, alert_update_id, aps_timestamp, priority, coalesce(\(now), now()),
                       CASE WHEN alert_update_id IS NOT NULL THEN coalesce(\(now), now()) END, received_at,
                       CASE WHEN update_id = postponed_end_update_id THEN aps_timestamp END
                FROM sent
                ON CONFLICT (event_id) DO UPDATE SET
                    update_id = EXCLUDED.update_id, alert_update_id = EXCLUDED.alert_update_id, aps_timestamp = EXCLUDED.aps_timestamp,
                    priority = EXCLUDED.priority, sent_at = EXCLUDED.sent_at, last_alert_at = coalesce(EXCLUDED.last_alert_at, t.last_alert_at),
                    update_received_at = EXCLUDED.update_received_at,
                    round_end_aps_timestamp = coalesce(EXCLUDED.round_end_aps_timestamp, t.round_end_aps_timestamp)
                RETURNING t.event_id
            ), disposed AS (
                UPDATE updates u SET disposition = CASE WHEN u.id = s.update_id THEN \(UpdateDisposition.broadcast.sql)
                                                        ELSE \(UpdateDisposition.conflated.sql) END,
                                     disposed_at = now()
                FROM sent s
                WHERE u.event_id = s.event_id AND u.disposition = \(pending) AND u.id <= s.update_id
                RETURNING u.id
            ), ended AS (
                UPDATE events e SET status = \(fragment: eventStatusAfterEnd), updated_at = now()
                FROM sent s
                WHERE e.id = s.event_id AND s.action = \(UpdateAction.end.sql) AND e.status IN \(EventLifecycle.endingStates.sql)
                RETURNING e.id
            ), deleted AS (
                DELETE FROM outbox o USING sent s WHERE o.id = s.id RETURNING o.id
            )
            SELECT event_id FROM sent
            """
    }
}
