// What the status page shows beyond `StatusRepository`'s figures, read from the database so every instance
// answers the same: live and upcoming events with their channel, the broadcasts APNs accepted lately with their
// ingest → accepted latency as a histogram, APNs errors of the last hour by reason, the events with start runs
// open, and the scheduler's lease.
import Foundation
import MarqueeCore
import Postgres

/// An event on the board: live, ending, or scheduled to start soon, with its newest channel.
public struct BoardEvent: Sendable, Equatable {
    public var id: Int
    public var appID: Int
    public var externalID: String
    public var kind: String
    public var status: EventStatus
    public var startsAt: Date
    public var endsAt: Date?
    public var channelLost: Bool
    /// The stored state of the event's newest channel; nil without one.
    public var channelState: String?
}

/// APNs errors of one reason (or `no answer`) and status.
public struct ReasonCount: Sendable, Equatable {
    public var reason: String
    public var status: Int?
    public var count: Int
    public var lastAt: Date
}

/// Broadcasts whose update waited at most `bound` seconds from ingest to APNs' acceptance (cumulative).
public struct LatencyBucket: Sendable, Equatable {
    public var bound: Double
    public var count: Int
}

/// The board's figures.
public struct StatusBoard: Sendable, Equatable {
    public var events: [BoardEvent]
    /// Broadcasts APNs accepted in the last `window` seconds.
    public var window: TimeInterval
    public var broadcastsAccepted: Int
    /// Of those, how many carried an update accepted at most `bound` seconds before APNs accepted them
    /// (cumulative, as Prometheus buckets), for each of `latencyBounds`.
    public var latencyBuckets: [LatencyBucket]
    public var errorsByReason: [ReasonCount]
    /// Events with a start run open (running or rolling), newest first.
    public var eventsWithOpenStartRuns: [Int]
    /// The scheduler lease's holder while it has not expired; nil when no instance leads.
    public var schedulerLeader: String?

}
/// Reads the status board in one consistent snapshot.
public struct StatusBoardRepository: Sendable {
    let pool: PostgresPool

    /// The latency histogram's upper bounds, in seconds (those of `marquee_broadcast_latency_seconds`).
    public static let latencyBounds: [Double] = [0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 5, 10, 30]

    public init(pool: PostgresPool) { self.pool = pool }

    /// Events scheduled to start within `horizon` seconds and those started (at most `eventLimit`), broadcasts
    /// of the last `window` seconds, errors of the last `errorWindow` seconds, and the lease named `leaseName`.
    public func board(
        horizon: TimeInterval = 6 * 3600, eventLimit: Int = 100, window: TimeInterval = 300, errorWindow: TimeInterval = 3600,
        leaseName: String
    ) async throws -> StatusBoard {
        try await pool.withTransaction(isolation: .repeatableRead) { tx in
            let events = try await tx.query(
                """
                SELECT e.id, e.app_id, e.external_id, e.kind, e.status, e.starts_at, e.ends_at, e.channel_lost, c.state AS channel_state
                FROM events e
                LEFT JOIN LATERAL (SELECT state FROM channels WHERE event_id = e.id ORDER BY id DESC LIMIT 1) c ON true
                WHERE e.status IN \(EventLifecycle.startedStates.sql)
                   OR (e.status IN \(EventLifecycle.toStartStates.sql) AND e.starts_at <= now() + make_interval(secs => \(horizon)))
                ORDER BY e.starts_at, e.id LIMIT \(eventLimit)
                """
            ).map { row in
                BoardEvent(
                    id: try row.decode(column: "id"), appID: try row.decode(column: "app_id"), externalID: try row.decode(column: "external_id"),
                    kind: try row.decode(column: "kind"), status: try row.decodeRaw(EventStatus.self, column: "status"),
                    startsAt: try row.decode(column: "starts_at"), endsAt: try row.decode(column: "ends_at"),
                    channelLost: try row.decode(column: "channel_lost"), channelState: try row.decode(column: "channel_state"))
            }
            let bounds = "{" + Self.latencyBounds.map { "\($0)" }.joined(separator: ",") + "}"
            let latencies = try await tx.query(
                """
                WITH accepted AS (
                    SELECT extract(epoch FROM d.sent_at - u.received_at)::float8 + coalesce(d.latency_us, 0) / 1e6 AS seconds
                    FROM deliveries d JOIN updates u ON u.id = d.update_id
                    WHERE d.kind = \(DeliveryKind.broadcast) AND d.status BETWEEN 200 AND 299
                      AND d.sent_at >= now() - make_interval(secs => \(window))
                )
                SELECT bound, (SELECT count(*) FROM accepted WHERE seconds <= bound) AS n, (SELECT count(*) FROM accepted) AS total
                FROM unnest(\(bounds)::float8[]) AS bound ORDER BY bound
                """)
            let buckets = try latencies.map { LatencyBucket(bound: try $0.decode(column: "bound"), count: try $0.decode(column: "n")) }
            let accepted = try latencies.first?.decode(Int.self, column: "total") ?? 0
            let errors = try await tx.query(
                """
                SELECT coalesce(reason, 'HTTP ' || status) AS reason, status, count(*) AS n, max(sent_at) AS last_at FROM deliveries
                WHERE (status IS NULL OR status >= 400) AND sent_at >= now() - make_interval(secs => \(errorWindow))
                GROUP BY 1, 2 ORDER BY n DESC, reason LIMIT 50
                """
            ).map { row in
                ReasonCount(
                    reason: try row.decode(column: "reason"), status: try row.decode(column: "status"), count: try row.decode(column: "n"),
                    lastAt: try row.decode(column: "last_at"))
            }
            let runs = try await tx.query(
                """
                SELECT event_id FROM start_runs WHERE state IN \(StartRunState.openStates.sql)
                GROUP BY event_id ORDER BY max(id) DESC LIMIT 20
                """
            ).map { try $0.decode(Int.self, column: "event_id") }
            let leader = try await tx.query(
                "SELECT holder FROM leader_leases WHERE name = \(leaseName) AND expires_at > now()"
            ).first.map { try $0.decode(String.self, column: "holder") }
            return StatusBoard(
                events: events, window: window, broadcastsAccepted: accepted, latencyBuckets: buckets, errorsByReason: errors,
                eventsWithOpenStartRuns: runs, schedulerLeader: leader)
        }
    }
}
