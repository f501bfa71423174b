// Mirroring's rows (Sql/0026): passes over an event's token activities, their keyset chunks, and each
// activity's last mirrored aps.timestamp. The mirroring service decides through MirrorPlanner; this performs.
import Foundation
import MarqueeCore
import Postgres

extension MirrorPassState: PostgresCodable {}

/// Mirroring passes, chunks and the tokens' progress.
public struct MirrorRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The newest state each event sent in the last day, by a channel's accepted broadcast or by the token route
    /// (`token_routes`, for an event with no channel that broadcasts): its aps.timestamp.
    private static func newestBroadcasts(now: Date?) -> PostgresQuery {
        """
        SELECT n.app_id, n.event_id, max(n.aps_timestamp) AS aps_timestamp FROM (
            SELECT c.app_id, c.event_id, c.last_aps_timestamp AS aps_timestamp FROM channels c
            WHERE c.event_id IS NOT NULL AND c.last_broadcast_at > coalesce(\(now), now()) - interval '1 day'
            UNION ALL
            SELECT t.app_id, t.event_id, t.aps_timestamp FROM token_routes t WHERE t.sent_at > coalesce(\(now), now()) - interval '1 day'
        ) n
        GROUP BY n.app_id, n.event_id
        """
    }

    /// Token activity `a` takes pushes now: a pending (scheduled) one only from its start date.
    static func takesPushes(now: Date?) -> PostgresQuery {
        "(a.state <> \(ActivityLifecycle.State.pending.sql) OR a.start_date <= coalesce(\(now), now()))"
    }

    /// Begins a pass for every event with a token activity behind its newest broadcast (and not waiting for a
    /// retry) and no pass running; returns the passes begun.
    public func beginDuePasses(now: Date? = nil) async throws -> [(pass: Int, eventID: Int)] {
        try await pool.query(
            """
            WITH newest AS (\(fragment: Self.newestBroadcasts(now: now)))
            INSERT INTO mirror_passes (app_id, event_id, started_aps_timestamp, update_received_at)
            SELECT n.app_id, n.event_id, n.aps_timestamp, (
                       SELECT u.received_at FROM updates u
                       WHERE u.event_id = n.event_id AND u.disposition = \(UpdateDisposition.broadcast.sql) ORDER BY u.id DESC LIMIT 1)
            FROM newest n
            WHERE EXISTS (SELECT 1 FROM activities a JOIN events e ON e.id = a.event_id
                          WHERE a.event_id = n.event_id AND a.state IN \(ActivityLifecycle.mirroredStates.sql)
                            AND a.push_type = \(ActivityPushType.token.sql)
                            AND coalesce(a.mirrored_aps_timestamp, 0) < n.aps_timestamp
                            AND (a.mirror_retry_at IS NULL OR a.mirror_retry_at <= coalesce(\(now), now()))
                            AND \(fragment: Self.takesPushes(now: now))
                            AND EXISTS (SELECT 1 FROM installations i WHERE i.id = a.installation AND i.live_activities_enabled)
                            AND \(fragment: Self.ofItsRound(apsTimestamp: "n.aps_timestamp")))
              AND NOT EXISTS (SELECT 1 FROM mirror_passes p WHERE p.event_id = n.event_id AND p.state = \(MirrorPassState.running.sql))
            ON CONFLICT DO NOTHING
            RETURNING id, event_id
            """
        ).map { (try $0.decode(Int.self, column: "id"), try $0.decode(Int.self, column: "event_id")) }
    }

    /// `a` (a token activity of event `e`) may be sent the broadcast with this aps.timestamp: an activity
    /// registered after the event's last postponement belongs to the new audience round, and is never sent the
    /// end that postponement queued for the activities running then, nor anything broadcast before it (on a channel or
    /// by the token route).
    static func ofItsRound(apsTimestamp: PostgresQuery) -> PostgresQuery {
        """
        NOT (e.postponed_at IS NOT NULL AND a.created_at > e.postponed_at
             AND \(fragment: apsTimestamp) <= greatest((SELECT max(d.aps_timestamp) FROM deliveries d
                                                       WHERE d.update_id = e.postponed_end_update_id AND d.status = 200),
                                                      (SELECT t.round_end_aps_timestamp FROM token_routes t WHERE t.event_id = e.id), 0))
        """
    }

    /// The running passes' ids.
    public func runningPassIDs() async throws -> [Int] {
        try await pool.query("SELECT id FROM mirror_passes WHERE state = \(MirrorPassState.running.sql) ORDER BY id").map {
            try $0.decode(Int.self, column: "id")
        }
    }

    /// Advances one pass under its row lock (nil when another instance holds it): cuts up to `cutAhead` chunks
    /// of `chunkSize` token activities while fewer wait unclaimed, or finishes it once every chunk is done.
    /// Returns the step and, for a finish, the seconds from its broadcast's ingest.
    public func advance(
        passID: Int, chunkSize: Int, cutAhead: Int, now: Date? = nil, decide: @Sendable (Bool, Int) -> MirrorPassStep
    ) async throws
        -> (step: MirrorPassStep, lag: Double?)?
    {
        try await pool.withTransaction { tx in
            guard
                let row = try await tx.query(
                    """
                    SELECT p.event_id, p.planned_through, p.planning_done,
                           extract(epoch FROM coalesce(\(now), now()) - p.update_received_at)::float8 AS lag,
                           (SELECT count(*) FROM mirror_chunks c WHERE c.pass_id = p.id AND NOT c.done)::integer AS open_chunks,
                           (SELECT count(*) FROM mirror_chunks c WHERE c.pass_id = p.id AND NOT c.done AND c.claimed_by IS NULL)::integer AS waiting
                    FROM mirror_passes p WHERE p.id = \(passID) AND p.state = \(MirrorPassState.running.sql)
                    FOR UPDATE OF p SKIP LOCKED
                    """
                ).first
            else { return nil }
            let step = decide(try row.decode(column: "planning_done"), try row.decode(column: "open_chunks"))
            switch step {
            case .wait:
                return (step, nil)
            case .finish:
                try await tx.execute(
                    "UPDATE mirror_passes SET state = \(MirrorPassState.done), finished_at = coalesce(\(now), now()) WHERE id = \(passID)")
                return (step, try row.decode(Double?.self, column: "lag"))
            case .cutChunk:
                let eventID: Int = try row.decode(column: "event_id")
                let (through, done) = try await ChunkLeases.cut(
                    from: try row.decode(column: "planned_through"), waiting: try row.decode(column: "waiting"), cutAhead: cutAhead,
                    chunkSize: chunkSize,
                    page: { after in
                        let page = try await tx.query(
                            """
                            SELECT max(id) AS through, count(*)::integer AS n FROM (
                                SELECT a.id FROM activities a
                                WHERE a.event_id = \(eventID) AND a.state IN \(ActivityLifecycle.mirroredStates.sql)
                                  AND a.push_type = \(ActivityPushType.token.sql) AND a.id > \(after)
                                ORDER BY a.id LIMIT \(chunkSize)) page
                            """
                        ).first!
                        return (try page.decode(Int?.self, column: "through"), try page.decode(Int.self, column: "n"))
                    },
                    insert: { after, last in
                        try await tx.execute(
                            "INSERT INTO mirror_chunks (pass_id, after_activity, through_activity) VALUES (\(passID), \(after), \(last))")
                    })
                try await tx.execute("UPDATE mirror_passes SET planned_through = \(through), planning_done = \(done) WHERE id = \(passID)")
                return (step, nil)
            }
        }
    }

    /// Claims the due chunk first in line whose lease ran out or whose holder stopped beating (`ChunkLeases`), with its
    /// pass's event and app.
    public func claimChunk(instance: String, lease: TimeInterval, now: Date? = nil) async throws -> ClaimedMirrorChunk? {
        guard let claimed = try await ChunkLeases.mirroring.claim(instance: instance, lease: lease, now: now, on: pool) else { return nil }
        let pass = try await pool.query("SELECT event_id, app_id FROM mirror_passes WHERE id = \(claimed.passID)")[0]
        return ClaimedMirrorChunk(
            id: claimed.id, passID: claimed.passID, eventID: try pass.decode(column: "event_id"), appID: try pass.decode(column: "app_id"),
            after: claimed.after, through: claimed.through, attempts: claimed.attempts)
    }

    /// Ends the chunk with its progress counts.
    public func finish(_ chunk: ClaimedMirrorChunk, instance: String, sent: Int, accepted: Int, failed: Int, now: Date? = nil) async throws {
        try await pool.execute(
            ChunkLeases.mirroring.finishStatement(
                chunkID: chunk.id, instance: instance,
                counts: "sent = c.sent + \(sent), accepted = c.accepted + \(accepted), failed = c.failed + \(failed)", now: now))
    }

    /// Gives the chunk back, due again after `delay` seconds.
    public func release(_ chunk: ClaimedMirrorChunk, instance: String, after delay: TimeInterval, now: Date? = nil) async throws {
        try await ChunkLeases.mirroring.release(chunkID: chunk.id, instance: instance, after: delay, now: now, on: pool)
    }

    /// What a mirrored push of the event carries now: its newest accepted broadcast, or the newest state the token
    /// route sent, whichever is newer (the update, the alert it carried, its aps.timestamp and priority), the
    /// event's storage policy and the app. Nil before any.
    public func content(eventID: Int) async throws -> MirrorContent? {
        guard
            let row = try await pool.query(
                """
                SELECT e.storage_policy, a.bundle_id, a.environment, d.aps_timestamp, d.priority, d.last_alert_at, u.id AS update_id,
                       u.action, u.content_state,
                       CASE WHEN d.alert_update_id IS NULL THEN u.alert
                            ELSE (SELECT carried.alert FROM updates carried WHERE carried.id = d.alert_update_id) END AS alert,
                       u.stale_date, u.dismissal_date, u.relevance_score, \(FreshnessSQL.columns)
                FROM events e
                \(FreshnessSQL.typePolicyJoin)
                JOIN apps a ON a.id = e.app_id
                CROSS JOIN LATERAL (
                    SELECT * FROM (
                        SELECT d.update_id, d.alert_update_id, d.aps_timestamp, d.priority, c.last_alert_at FROM channels c
                        JOIN LATERAL (
                            SELECT update_id, alert_update_id, aps_timestamp, priority FROM deliveries
                            WHERE channel_id = c.id AND kind = 'broadcast' AND status = 200 ORDER BY sent_at DESC LIMIT 1
                        ) d ON true
                        WHERE c.event_id = e.id
                        UNION ALL
                        SELECT t.update_id, t.alert_update_id, t.aps_timestamp, t.priority, t.last_alert_at FROM token_routes t
                        WHERE t.event_id = e.id
                    ) newest ORDER BY aps_timestamp DESC LIMIT 1
                ) d
                JOIN updates u ON u.id = d.update_id
                WHERE e.id = \(eventID)
                """
            ).first
        else { return nil }
        return MirrorContent(
            app: StartApp(bundleID: try row.decode(column: "bundle_id"), environment: try row.decode(column: "environment")),
            storagePolicy: try row.decodeRaw(MessageStoragePolicy.self, column: "storage_policy"),
            apsTimestamp: try row.decode(column: "aps_timestamp"), priority: try row.decode(Int?.self, column: "priority") ?? 10,
            updateID: try row.decode(column: "update_id"), action: try row.decodeRaw(UpdateAction.self, column: "action"),
            contentState: try row.decodeJSON(column: "content_state") ?? [:], alert: try row.decodeJSON(column: "alert"),
            explicitFields: SendTimeFields(
                staleDate: try row.decode(column: "stale_date"), relevanceScore: try row.decode(column: "relevance_score"),
                dismissalDate: try row.decode(column: "dismissal_date")),
            freshness: try row.freshnessPolicy(), lastAlertAt: try row.decode(column: "last_alert_at"))
    }

    /// The chunk's token activities behind `apsTimestamp`, not waiting for a retry, of installations with Live
    /// Activities enabled (`liveActivitiesEnabled: false` stops updates too).
    public func tokens(of chunk: ClaimedMirrorChunk, behind apsTimestamp: Int64, now: Date? = nil) async throws -> [MirrorToken] {
        try await pool.query(
            """
            SELECT a.id, a.installation, a.push_token, a.high_priority_window_at, a.high_priority_count, i.frequent_pushes_enabled
            FROM activities a JOIN installations i ON i.id = a.installation JOIN events e ON e.id = a.event_id
            WHERE a.event_id = \(chunk.eventID) AND a.state IN \(ActivityLifecycle.mirroredStates.sql) AND i.live_activities_enabled
              AND a.push_type = \(ActivityPushType.token.sql) AND a.id > \(chunk.after) AND a.id <= \(chunk.through)
              AND coalesce(a.mirrored_aps_timestamp, 0) < \(apsTimestamp)
              AND (a.mirror_retry_at IS NULL OR a.mirror_retry_at <= coalesce(\(now), now()))
              AND \(fragment: Self.takesPushes(now: now)) AND \(fragment: Self.ofItsRound(apsTimestamp: "\(apsTimestamp)::bigint"))
            ORDER BY a.id
            """
        ).map { row in
            MirrorToken(
                activityID: try row.decode(column: "id"), installation: try row.decode(column: "installation"),
                token: try row.decode(column: "push_token"), frequentPushes: try row.decode(column: "frequent_pushes_enabled"),
                highPriority: TokenHighPriorityWindow(
                    startedAt: try row.decode(column: "high_priority_window_at"), count: try row.decode(column: "high_priority_count")))
        }
    }

    /// Writes a window's outcomes, one statement: served tokens take the timestamp (never lower), throttled
    /// ones wait `retryAfter`, failed ones count a failure.
    public func record(_ outcomes: [MirrorOutcome], now: Date? = nil) async throws {
        guard !outcomes.isEmpty else { return }
        let input = JSONValue.array(
            outcomes.map {
                [
                    "id": .int(Int64($0.activityID)), "served": $0.servedTimestamp.map(JSONValue.int) ?? .null,
                    "retry_after": $0.retryAfter.map(JSONValue.double) ?? .null, "failed": .bool($0.failed),
                    "window_at": $0.highPriority?.startedAt.map { .double($0.timeIntervalSince1970) } ?? .null,
                    "window_count": $0.highPriority.map { .int(Int64($0.count)) } ?? .null,
                ]
            })
        try await pool.execute(
            """
            WITH input AS (
                SELECT * FROM jsonb_to_recordset(\(input.postgresJSON)::jsonb) AS i (id bigint, served bigint, retry_after float8, failed boolean,
                                                                                    window_at float8, window_count integer)
            )
            UPDATE activities a SET
                mirrored_aps_timestamp = CASE WHEN i.served IS NOT NULL THEN greatest(coalesce(a.mirrored_aps_timestamp, 0), i.served)
                                              ELSE a.mirrored_aps_timestamp END,
                mirror_retry_at = CASE WHEN i.retry_after IS NOT NULL THEN coalesce(\(now), now()) + make_interval(secs => i.retry_after) END,
                mirror_failures = CASE WHEN i.failed THEN a.mirror_failures + 1 WHEN i.served IS NOT NULL THEN 0 ELSE a.mirror_failures END,
                high_priority_window_at = CASE WHEN i.window_count IS NOT NULL THEN to_timestamp(i.window_at) ELSE a.high_priority_window_at END,
                high_priority_count = coalesce(i.window_count, a.high_priority_count)
            FROM input i WHERE a.id = i.id
            """)
    }

    /// The event's token activities: how many, and how many of those whose installation has Live Activities
    /// enabled are behind its newest broadcast (a disabled installation is sent nothing).
    public func progress(eventID: Int) async throws -> (activities: Int, behind: Int, lastLag: Double?) {
        let row = try await pool.query(
            """
            WITH newest AS (
                SELECT greatest((SELECT max(last_aps_timestamp) FROM channels WHERE event_id = \(eventID) AND last_broadcast_at IS NOT NULL),
                                (SELECT aps_timestamp FROM token_routes WHERE event_id = \(eventID))) AS ts)
            SELECT count(*)::integer AS activities,
                   count(*) FILTER (WHERE coalesce(a.mirrored_aps_timestamp, 0) < (SELECT ts FROM newest) AND i.live_activities_enabled
                                    AND \(fragment: Self.ofItsRound(apsTimestamp: "(SELECT ts FROM newest)")))::integer AS behind,
                   (SELECT extract(epoch FROM p.finished_at - p.update_received_at)::float8 FROM mirror_passes p
                    WHERE p.event_id = \(eventID) AND p.state = \(MirrorPassState.done.sql) ORDER BY p.id DESC LIMIT 1) AS lag
            FROM activities a JOIN installations i ON i.id = a.installation JOIN events e ON e.id = a.event_id
            WHERE a.event_id = \(eventID) AND a.state IN \(ActivityLifecycle.mirroredStates.sql) AND a.push_type = \(ActivityPushType.token.sql)
            """
        ).first!
        return (try row.decode(column: "activities"), try row.decode(column: "behind"), try row.decode(column: "lag"))
    }

    /// Passes waiting or running, for the backlog metric.
    public func backlog() async throws -> Int {
        try await pool.query("SELECT count(*)::integer AS n FROM mirror_passes WHERE state = \(MirrorPassState.running.sql)").first!
            .decode(column: "n")
    }

    /// Deletes passes finished before `cutoff` (their chunks go with them).
    public func purge(finishedBefore cutoff: Date) async throws -> Int {
        try await pool.execute("DELETE FROM mirror_passes WHERE state = \(MirrorPassState.done.sql) AND finished_at < \(cutoff)")
    }
}

/// A mirroring chunk this instance holds.
public struct ClaimedMirrorChunk: Sendable, Equatable {
    public let id: Int
    public let passID: Int
    public let eventID: Int
    public let appID: Int
    /// The activities (after, through].
    public let after: Int
    public let through: Int
    public let attempts: Int
}

/// One token activity to mirror to.
public struct MirrorToken: Sendable, Equatable {
    public let activityID: Int
    public let installation: Int
    public let token: String
    /// `frequentPushesEnabled` of its installation: the smaller priority-10 budget when false.
    public let frequentPushes: Bool
    public let highPriority: TokenHighPriorityWindow
}

/// The newest broadcast of an event, as a mirrored push carries it.
public struct MirrorContent: Sendable {
    public let app: StartApp
    public let storagePolicy: MessageStoragePolicy
    public let apsTimestamp: Int64
    /// The broadcast's priority (10 or 5).
    public let priority: Int
    public let updateID: Int
    public let action: UpdateAction
    public let contentState: JSONValue
    public let alert: JSONValue?
    /// The fields the update set itself.
    public let explicitFields: SendTimeFields
    /// The event's freshness policy, for the fields the update left to it.
    public let freshness: FreshnessPolicy
    /// When the channel's last broadcast with an alert was accepted.
    public let lastAlertAt: Date?
}

/// What happened to one token in a window.
public struct MirrorOutcome: Sendable, Equatable {
    public let activityID: Int
    /// Accepted with this aps.timestamp.
    public let servedTimestamp: Int64?
    public let retryAfter: TimeInterval?
    public let failed: Bool
    /// The token's priority-10 window after an accepted push (nil: unchanged).
    public let highPriority: TokenHighPriorityWindow?

    public init(
        activityID: Int, servedTimestamp: Int64?, retryAfter: TimeInterval?, failed: Bool, highPriority: TokenHighPriorityWindow? = nil
    ) {
        self.activityID = activityID
        self.servedTimestamp = servedTimestamp
        self.retryAfter = retryAfter
        self.failed = failed
        self.highPriority = highPriority
    }
}
