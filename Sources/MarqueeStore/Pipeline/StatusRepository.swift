import Foundation
import MarqueeCore
import Postgres

/// One app's channels by state, and how many count against Apple's quota.
public struct AppChannelStatus: Sendable, Equatable {
    public var appID: Int
    public var bundleID: String
    public var environment: String
    /// Stored state name → channels.
    public var channelsByState: [String: Int]
    /// Channels that count against the quota (see `StoredChannelState.countsAgainstQuota`).
    public var quotaInUse: Int
    /// Parked because APNs refused the app's credentials (`CredentialsPark`); nil when not.
    public var credentialsPark: CredentialsPark?
}

/// An event whose channel APNs no longer knows.
public struct LostChannel: Sendable, Equatable {
    public var eventID: Int
    public var appID: Int
    public var externalID: String
    public var channelID: Int?
    public var apnsChannelID: String?
    public var lastError: String?
}

/// The figures `marquee status` shows.
public struct PipelineStatus: Sendable, Equatable {
    public var apps: [AppChannelStatus]
    /// Outbox rows waiting (claimed or not), and the age of the oldest, in seconds.
    public var outboxBacklog: Int
    public var oldestOutboxAge: TimeInterval?
    public var lostChannels: [LostChannel]
    public var lastErrors: [DeliveryRecord]
    /// Start runs in their first pass over the audience (`running`; not the `rolling` late passes).
    public var startRunsInFirstPass: Int
    /// Mirroring passes running, and the age of the oldest, in seconds (from its broadcast's ingest when known).
    public var mirrorPassesRunning: Int
    public var oldestMirrorPassAge: TimeInterval?
}

/// Reads the status figures in one consistent snapshot.
public struct StatusRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Channels per app and state, outbox backlog, lost channels, and the last `errorLimit` failed exchanges.
    public func status(errorLimit: Int = 10) async throws -> PipelineStatus {
        try await pool.withTransaction(isolation: .repeatableRead) { tx in
            var apps: [Int: AppChannelStatus] = [:]
            for row in try await tx.query(
                """
                SELECT a.id, a.bundle_id, a.environment, c.state, count(c.id) AS n
                FROM apps a LEFT JOIN channels c ON c.app_id = a.id
                GROUP BY a.id, a.bundle_id, a.environment, c.state ORDER BY a.id
                """)
            {
                let id = try row.decode(Int.self, column: "id")
                let bundleID = try row.decode(String.self, column: "bundle_id")
                let environment = try row.decode(String.self, column: "environment")
                var app =
                    apps[id]
                    ?? AppChannelStatus(
                        appID: id, bundleID: bundleID, environment: environment,
                        channelsByState: [:], quotaInUse: 0)
                if let state = try row.decode(String?.self, column: "state") {
                    let count = try row.decode(Int.self, column: "n")
                    app.channelsByState[state] = count
                    if StoredChannelState(rawValue: state)?.countsAgainstQuota == true { app.quotaInUse += count }
                }
                apps[id] = app
            }
            for row in try await tx.query("SELECT app_id, \(unsafeRaw: CredentialsParkRepository.columns) FROM app_credential_faults") {
                apps[try row.decode(Int.self, column: "app_id")]?.credentialsPark = try CredentialsParkRepository.park(row: row)
            }
            let backlog = try await tx.query(
                """
                SELECT count(*) AS n, extract(epoch FROM now() - min(created_at))::float8 AS oldest FROM outbox
                """)[0]
            let lost = try await tx.query(
                """
                SELECT e.id, e.app_id, e.external_id, c.id AS channel_id, c.apns_channel_id, c.last_error
                FROM events e
                LEFT JOIN LATERAL (SELECT * FROM channels WHERE event_id = e.id ORDER BY id DESC LIMIT 1) c ON true
                WHERE e.channel_lost ORDER BY e.id
                """
            ).map { row in
                LostChannel(
                    eventID: try row.decode(Int.self, column: "id"), appID: try row.decode(Int.self, column: "app_id"),
                    externalID: try row.decode(String.self, column: "external_id"),
                    channelID: try row.decode(Int?.self, column: "channel_id"),
                    apnsChannelID: try row.decode(String?.self, column: "apns_channel_id"),
                    lastError: try row.decode(String?.self, column: "last_error"))
            }
            let errors = try await tx.query(
                """
                SELECT \(unsafeRaw: DeliveryRecord.columns) FROM deliveries WHERE status IS NULL OR status >= 400
                ORDER BY sent_at DESC, id DESC LIMIT \(errorLimit)
                """
            ).map(DeliveryRecord.init(row:))
            let audience = try await tx.query(
                """
                SELECT (SELECT count(*) FROM start_runs WHERE state = \(StartRunState.running.sql)) AS runs,
                       count(*) AS passes,
                       extract(epoch FROM now() - min(coalesce(update_received_at, created_at)))::float8 AS oldest
                FROM mirror_passes WHERE state = \(MirrorPassState.running.sql)
                """)[0]
            return PipelineStatus(
                apps: apps.values.sorted { $0.appID < $1.appID },
                outboxBacklog: try backlog.decode(Int.self, column: "n"),
                oldestOutboxAge: try backlog.decode(Double?.self, column: "oldest"),
                lostChannels: lost, lastErrors: errors, startRunsInFirstPass: try audience.decode(Int.self, column: "runs"),
                mirrorPassesRunning: try audience.decode(Int.self, column: "passes"),
                oldestMirrorPassAge: try audience.decode(Double?.self, column: "oldest"))
        }
    }
}
