import Foundation
import Postgres

/// The kind of APNs exchange a delivery row records (`deliveries.kind`).
public enum DeliveryKind: String, Sendable, Codable, CaseIterable, PostgresCodable {
    case broadcast
    case channelCreate = "channel_create"
    case channelRead = "channel_read"
    case channelDelete = "channel_delete"
    case channelList = "channel_list"
    case push
}

/// One APNs exchange to record, answered or not.
public struct DeliveryDraft: Sendable, Equatable {
    public var appID: Int
    public var kind: DeliveryKind
    public var channelID: Int?
    public var updateID: Int?
    public var apnsRequestID: UUID?
    public var apnsUniqueID: UUID?
    /// HTTP status; nil when no answer came (then `reason` says why: timeout, connection lost).
    public var status: Int?
    /// APNs' reason, or the local cause of a missing answer.
    public var reason: String?
    public var latencyMicroseconds: Int64?
    /// 5 or 10 (1 for pushes at the lowest priority).
    public var priority: Int?
    public var attempt: Int
    public var apsTimestamp: Int64?

    public init(
        appID: Int, kind: DeliveryKind, channelID: Int? = nil, updateID: Int? = nil, apnsRequestID: UUID? = nil,
        apnsUniqueID: UUID? = nil, status: Int?, reason: String? = nil, latencyMicroseconds: Int64? = nil,
        priority: Int? = nil, attempt: Int = 1, apsTimestamp: Int64? = nil
    ) {
        self.appID = appID
        self.kind = kind
        self.channelID = channelID
        self.updateID = updateID
        self.apnsRequestID = apnsRequestID
        self.apnsUniqueID = apnsUniqueID
        self.status = status
        self.reason = reason
        self.latencyMicroseconds = latencyMicroseconds
        self.priority = priority
        self.attempt = attempt
        self.apsTimestamp = apsTimestamp
    }
}

/// A stored delivery row.
public struct DeliveryRecord: Sendable, Equatable {
    public var id: Int
    public var draft: DeliveryDraft
    public var sentAt: Date

    static let columns = """
        id, app_id, kind, channel_id, update_id, apns_request_id, apns_unique_id, status, reason, latency_us, \
        priority, attempt, aps_timestamp, sent_at
        """

    init(row: PostgresRow) throws {
        id = try row.decode(Int.self, column: "id")
        sentAt = try row.decode(Date.self, column: "sent_at")
        draft = DeliveryDraft(
            appID: try row.decode(Int.self, column: "app_id"), kind: try row.decode(DeliveryKind.self, column: "kind"),
            channelID: try row.decode(Int?.self, column: "channel_id"), updateID: try row.decode(Int?.self, column: "update_id"),
            apnsRequestID: try row.decode(UUID?.self, column: "apns_request_id"),
            apnsUniqueID: try row.decode(UUID?.self, column: "apns_unique_id"),
            status: try row.decode(Int?.self, column: "status"), reason: try row.decode(String?.self, column: "reason"),
            latencyMicroseconds: try row.decode(Int64?.self, column: "latency_us"),
            priority: try row.decode(Int?.self, column: "priority"), attempt: try row.decode(Int.self, column: "attempt"),
            apsTimestamp: try row.decode(Int64?.self, column: "aps_timestamp"))
    }
}

/// Deliveries: every APNs exchange, and the recent ones and last errors for `marquee status`.
public struct DeliveryRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// When each channel's accepted priority-10 broadcasts since `since` were sent, oldest first, by channel id
    /// (a channel's hourly budget, rebuilt after a restart or another instance's send).
    public func highPrioritySends(channelIDs: [Int], since: Date) async throws -> [Int: [Date]] {
        var sends: [Int: [Date]] = [:]
        for row in try await pool.query(
            """
            SELECT channel_id, sent_at FROM deliveries
            WHERE channel_id = ANY (\(channelIDs.map(String.init))::bigint[]) AND kind = \(DeliveryKind.broadcast.sql) AND status = 200
              AND priority = 10 AND sent_at > \(since)
            ORDER BY channel_id, sent_at
            """)
        {
            sends[try row.decode(Int.self, column: "channel_id"), default: []].append(try row.decode(Date.self, column: "sent_at"))
        }
        return sends
    }

    /// Records one exchange; returns its id.
    @discardableResult
    public func insert(_ delivery: DeliveryDraft) async throws -> Int {
        try await pool.withConnection { try await Self.insert(delivery, on: $0) }
    }

    @discardableResult
    static func insert(_ d: DeliveryDraft, on connection: PostgresConnection) async throws -> Int {
        try await connection.query("\(fragment: insertSelect(d)) RETURNING id")[0].decode(Int.self, column: "id")
    }

    /// `INSERT INTO deliveries (...) SELECT <the values, typed>`: a statement of its own, or, followed by
    /// `FROM cte`, one step of a larger statement that inserts only when that CTE returned a row.
    static func insertSelect(_ d: DeliveryDraft) -> PostgresQuery {
        """
        INSERT INTO deliveries (app_id, kind, channel_id, update_id, apns_request_id, apns_unique_id, status, reason,
                                latency_us, priority, attempt, aps_timestamp)
        SELECT \(d.appID)::bigint, \(d.kind)::text, \(d.channelID)::bigint, \(d.updateID)::bigint, \(d.apnsRequestID)::uuid,
               \(d.apnsUniqueID)::uuid, \(d.status)::integer, \(d.reason)::text, \(d.latencyMicroseconds)::bigint,
               \(d.priority)::smallint, \(d.attempt)::integer, \(d.apsTimestamp)::bigint
        """
    }

    /// The channel's latest exchanges, newest first.
    public func recent(channelID: Int, limit: Int = 20) async throws -> [DeliveryRecord] {
        try await pool.query(
            """
            SELECT \(unsafeRaw: DeliveryRecord.columns) FROM deliveries WHERE channel_id = \(channelID)
            ORDER BY sent_at DESC, id DESC LIMIT \(limit)
            """
        ).map(DeliveryRecord.init(row:))
    }

    /// Deletes the rows of exchanges sent before `cutoff`, oldest first, `batch` rows a statement (so no
    /// statement holds locks or a snapshot for long) and at most `statements` statements; returns how many
    /// went. Nothing points at deliveries.
    @discardableResult
    public func purge(sentBefore cutoff: Date, batch: Int = 10_000, statements: Int = .max) async throws -> Int {
        try await BatchedStatements.run(batch: batch, limit: statements) {
            try await pool.execute(
                """
                DELETE FROM deliveries WHERE id IN (
                    SELECT id FROM deliveries WHERE sent_at < \(cutoff) ORDER BY sent_at LIMIT \(batch))
                """)
        }
    }

    /// The latest failed exchanges (no answer, or a status of 400 and above), of one app or all, newest first.
    public func lastErrors(appID: Int? = nil, limit: Int = 20) async throws -> [DeliveryRecord] {
        try await pool.query(
            """
            SELECT \(unsafeRaw: DeliveryRecord.columns) FROM deliveries
            WHERE (status IS NULL OR status >= 400) AND (\(appID)::bigint IS NULL OR app_id = \(appID))
            ORDER BY sent_at DESC, id DESC LIMIT \(limit)
            """
        ).map(DeliveryRecord.init(row:))
    }
}
