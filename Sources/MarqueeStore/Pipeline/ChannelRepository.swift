// Channels as ChannelLifecycle persists them. The state machine decides in memory; this repository
// writes its result guarded by the state (and attempt count) the caller read, so a stale writer
// (another instance, a late timer) changes nothing and learns so from the returned Bool.
import Foundation
import MarqueeCore
import Postgres

/// One row of `channels`.
public struct ChannelRecord: Sendable, Equatable {
    public var id: Int
    public var appID: Int
    /// nil for unknown channels found only in Apple's list.
    public var eventID: Int?
    /// Apple's base64 id; nil until a create answered.
    public var apnsChannelID: String?
    public var storagePolicy: MessageStoragePolicy
    public var state: StoredChannelState
    public var attempts: Int
    public var nextAttemptAt: Date?
    public var requestedAt: Date?
    public var openedAt: Date?
    public var endedAt: Date?
    public var deletedAt: Date?
    public var firstSeenAt: Date?
    public var lastApsTimestamp: Int64?
    public var lastError: String?
    public var lastErrorAt: Date?
    public var createdAt: Date

    /// The state machine value to drive; nil for unknown channels.
    public var lifecycle: ChannelLifecycle? {
        guard case .lifecycle(let state) = state else { return nil }
        return ChannelLifecycle(state: state, attempt: attempts)
    }

    static let columns = """
        id, app_id, event_id, apns_channel_id, storage_policy, state, attempts, next_attempt_at, requested_at, \
        opened_at, ended_at, deleted_at, first_seen_at, last_aps_timestamp, last_error, last_error_at, created_at
        """
}

extension ChannelRecord {
    init(row: PostgresRow) throws {
        id = try row.decode(Int.self, column: "id")
        appID = try row.decode(Int.self, column: "app_id")
        eventID = try row.decode(Int?.self, column: "event_id")
        apnsChannelID = try row.decode(String?.self, column: "apns_channel_id")
        storagePolicy = try row.decodeRaw(MessageStoragePolicy.self, column: "storage_policy")
        state = try row.decodeChannelState()
        attempts = try row.decode(Int.self, column: "attempts")
        nextAttemptAt = try row.decode(Date?.self, column: "next_attempt_at")
        requestedAt = try row.decode(Date?.self, column: "requested_at")
        openedAt = try row.decode(Date?.self, column: "opened_at")
        endedAt = try row.decode(Date?.self, column: "ended_at")
        deletedAt = try row.decode(Date?.self, column: "deleted_at")
        firstSeenAt = try row.decode(Date?.self, column: "first_seen_at")
        lastApsTimestamp = try row.decode(Int64?.self, column: "last_aps_timestamp")
        lastError = try row.decode(String?.self, column: "last_error")
        lastErrorAt = try row.decode(Date?.self, column: "last_error_at")
        createdAt = try row.decode(Date.self, column: "created_at")
    }
}

/// What the scheduler should act on now.
public struct SchedulerWork: Sendable, Equatable {
    /// Events within the lead time (or with queued updates) that have no channel at all: create a planned one.
    public var eventsNeedingChannel: [EventRecord] = []
    /// Planned channels: report `leadTimeReached()` and create.
    public var plannedChannels: [ChannelRecord] = []
    /// Creates and deletes whose backoff elapsed: report `retryDue()`.
    public var retriesDue: [ChannelRecord] = []
    /// Creates that timed out: reconcile with Apple's list.
    public var unresolvedCreates: [ChannelRecord] = []
    /// Ended channels past the delete delay: report `deleteDelayElapsed()`.
    public var deletionsDue: [ChannelRecord] = []
    /// Events past `ends_at` plus the grace period with no end requested: end them.
    public var eventsToEnd: [EventRecord] = []
    /// Events ending with no channel left that could carry the end (its create failed for good, or it
    /// was lost): they end without one.
    public var endsWithoutChannel: [EventRecord] = []

    public var isEmpty: Bool { items.isEmpty }

    /// One item of work: the event or the channel it is about.
    public enum Item: Hashable, Sendable {
        case event(Int)
        case channel(Int)
    }

    private static var eventKinds: [WritableKeyPath<SchedulerWork, [EventRecord]>] {
        [\.eventsNeedingChannel, \.eventsToEnd, \.endsWithoutChannel]
    }
    private static var channelKinds: [WritableKeyPath<SchedulerWork, [ChannelRecord]>] {
        [\.plannedChannels, \.retriesDue, \.unresolvedCreates, \.deletionsDue]
    }

    /// Every item, so that a later read can leave out what a sweep has already handled.
    public var items: Set<Item> {
        Set(
            Self.eventKinds.flatMap { self[keyPath: $0].map { Item.event($0.id) } }
                + Self.channelKinds.flatMap { self[keyPath: $0].map { Item.channel($0.id) } })
    }

    /// This work without the items in `handled`.
    public func excluding(_ handled: Set<Item>) -> SchedulerWork {
        var work = self
        for kind in Self.eventKinds { work[keyPath: kind].removeAll { handled.contains(.event($0.id)) } }
        for kind in Self.channelKinds { work[keyPath: kind].removeAll { handled.contains(.channel($0.id)) } }
        return work
    }

    /// Whether some kind of work filled its batch of `limit` (more of it may be waiting).
    public func fills(limit: Int) -> Bool {
        Self.eventKinds.contains { self[keyPath: $0].count >= limit } || Self.channelKinds.contains { self[keyPath: $0].count >= limit }
    }
}

/// The outcome of comparing Apple's channel list of an app with the database.
public struct ReconcileReport: Sendable, Equatable {
    /// Channels in Apple's list the database did not know, recorded now as 'unknown' with first_seen_at.
    public var newlyRecorded: [ChannelRecord]
    /// Every 'unknown' channel of the app still in Apple's list (older ones included; delete is opt-in).
    /// Unknown channels no longer listed are marked deleted.
    public var unknown: [ChannelRecord]
    /// Channels the database believes exist at APNs that Apple's list lacks: report `reconcileNotFound()`.
    public var missing: [ChannelRecord]
    /// Channels marked deleted that Apple still lists: report `reconcileFound()` (it deletes again).
    public var resurrected: [ChannelRecord]
}

/// What a reconcile would find for one app, without changing anything (`marquee channel reconcile --dry-run`).
public struct ReconcilePreview: Sendable, Equatable {
    public var appID: Int
    /// Apple ids in Apple's list that no channel row has (a reconcile records them as unknown).
    public var unrecorded: [String]
    /// Apple ids already recorded as unknown and still listed.
    public var unknown: [String]
    /// Channels (row ids) the database believes exist that Apple's list lacks (a reconcile flags or settles them).
    public var missing: [Int]
    /// Channels (row ids) marked deleted that Apple still lists (a reconcile deletes them again).
    public var resurrected: [Int]
}

/// Channels: planned creation, lifecycle transitions, quota counts, scheduler work and reconcile.
public struct ChannelRepository: Sendable {
    /// Whether channel `c` belongs to event `e`'s current audience round: before any postponement every channel
    /// of the event does (one deleted by an operator or by `app remove` is not replaced); after one, a channel
    /// still current, or made since (the round before ended its own, and the new round gets a new one).
    static let ofCurrentRound: PostgresQuery = """
        (c.state IN \(ChannelLifecycle.currentStates.sql) OR e.postponed_at IS NULL OR c.created_at >= e.postponed_at)
        """

    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The event's live channel, created as 'planned' if it has none. Throws `eventNotFound`, or
    /// `leaseNotHeld` when `fence` is given and no longer holds (then nothing changed).
    public func createPlanned(eventID: Int, fence: LeaseGrant? = nil) async throws -> ChannelRecord {
        try await pool.withTransaction { tx in
            try await LeaderLeaseRepository.requireHeld(fence, now: nil, on: tx)
            let inserted = try await tx.query(
                """
                INSERT INTO channels (app_id, event_id, storage_policy)
                SELECT app_id, id, storage_policy FROM events WHERE id = \(eventID)
                ON CONFLICT (event_id) WHERE state IN \(ChannelLifecycle.currentStates.sql) DO NOTHING
                RETURNING \(unsafeRaw: ChannelRecord.columns)
                """)
            if let row = inserted.first { return try ChannelRecord(row: row) }
            let live = try await tx.query(
                """
                SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels
                WHERE event_id = \(eventID) AND state IN \(ChannelLifecycle.currentStates.sql)
                """)
            guard let row = live.first else { throw PipelineError.eventNotFound(eventID) }
            return try ChannelRecord(row: row)
        }
    }

    /// The channel with this id, or nil.
    public func get(id: Int) async throws -> ChannelRecord? {
        try await pool.query("SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels WHERE id = \(id)")
            .first.map(ChannelRecord.init(row:))
    }

    /// The app's channel with Apple's id, or nil.
    public func get(appID: Int, apnsChannelID: String) async throws -> ChannelRecord? {
        try await pool.query(
            """
            SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels WHERE app_id = \(appID) AND apns_channel_id = \(apnsChannelID)
            """
        ).first.map(ChannelRecord.init(row:))
    }

    /// Channels newest first, optionally of one app, in one stored state, or of one event.
    public func list(
        appID: Int? = nil, state: StoredChannelState? = nil, eventID: Int? = nil,
        limit: Int = 100
    ) async throws -> [ChannelRecord] {
        try await pool.query(
            """
            SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels
            WHERE (\(appID)::bigint IS NULL OR app_id = \(appID)) AND (\(state?.rawValue)::text IS NULL OR state = \(state?.rawValue))
              AND (\(eventID)::bigint IS NULL OR event_id = \(eventID))
            ORDER BY id DESC LIMIT \(limit)
            """
        ).map(ChannelRecord.init(row:))
    }

    /// The event's channels, newest first (the live one, if any, is among them).
    public func channels(eventID: Int) async throws -> [ChannelRecord] {
        try await pool.query(
            """
            SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels WHERE event_id = \(eventID) ORDER BY id DESC
            """
        ).map(ChannelRecord.init(row:))
    }

    /// Persists a ChannelLifecycle step: writes `new` (state, attempt, retry time) only if the row still
    /// holds `old`'s state and attempt. `apnsChannelID` records Apple's id (and first_seen_at) from a
    /// create answer; `error` records the last error. It writes the channel's row only: what the move does to
    /// the event's broadcasts is the caller's `broadcasts` (`ChannelLifecycle.broadcasts(from:to:)`), which
    /// `OutboxWriter` performs in the same transaction. Returns false for a stale writer.
    ///
    /// Entering 'creating' or 'deleting' without `nextAttemptAt` sets it to now + `inFlightTimeout`:
    /// if this instance dies before recording the answer, the request shows up in `retriesDue` then.
    /// With `fence`, nothing is written unless the lease still holds (`leaseNotHeld`).
    @discardableResult
    public func transition(
        channelID: Int, from old: ChannelLifecycle, to new: ChannelLifecycle,
        nextAttemptAt: Date? = nil, apnsChannelID: String? = nil, error: String? = nil,
        inFlightTimeout: TimeInterval = 120, fence: LeaseGrant? = nil,
        now: Date? = nil, broadcasts: ChannelLifecycle.BroadcastChange? = nil
    ) async throws -> Bool {
        let requestInFlight = new.state == .creating || new.state == .deleting
        // A channel created again (an operator's recreate of a lost or refused one) starts without the old
        // channel's error: `channel list` and `show` would otherwise show it on the new one.
        let createdAgain = (old.state == .lost || old.state == .createFailed) && new.state == .creating
        // A channel that opens has no error to show either: one its create met before (a handshake refused, a 503) is
        // settled.
        let errorSettled = createdAgain || (new.state == .open && old.state != .open)
        return try await pool.withTransaction { tx in
            try await LeaderLeaseRepository.requireHeld(fence, now: now, on: tx)
            let rows = try await tx.query(
                """
                UPDATE channels SET
                    state = \(new.state.rawValue), attempts = \(new.attempt),
                    next_attempt_at = coalesce(\(nextAttemptAt), CASE WHEN \(requestInFlight)
                        THEN coalesce(\(now), now()) + make_interval(secs => \(inFlightTimeout)) END),
                    apns_channel_id = coalesce(\(apnsChannelID), apns_channel_id),
                    first_seen_at = CASE WHEN \(apnsChannelID)::text IS DISTINCT FROM apns_channel_id AND \(apnsChannelID)::text IS NOT NULL
                                         THEN coalesce(\(now), now()) ELSE first_seen_at END,
                    requested_at = CASE WHEN \(new.state.rawValue) = \(ChannelLifecycle.State.creating.sql) THEN coalesce(\(now), now()) ELSE requested_at END,
                    opened_at = CASE WHEN \(new.state.rawValue) = \(ChannelLifecycle.State.open.sql) AND state <> \(ChannelLifecycle.State.open.sql) THEN coalesce(\(now), now()) ELSE opened_at END,
                    ended_at = CASE WHEN \(new.state.rawValue) = \(ChannelLifecycle.State.ended.sql) THEN coalesce(\(now), now()) ELSE ended_at END,
                    deleted_at = CASE WHEN \(new.state.rawValue) = \(ChannelLifecycle.State.deleted.sql) THEN coalesce(\(now), now()) ELSE deleted_at END,
                    last_error = CASE WHEN \(errorSettled) THEN \(error) ELSE coalesce(\(error), last_error) END,
                    last_error_at = CASE WHEN \(error)::text IS NOT NULL THEN coalesce(\(now), now())
                                         WHEN \(errorSettled) THEN NULL ELSE last_error_at END,
                    updated_at = now()
                WHERE id = \(channelID) AND state = \(old.state.rawValue) AND attempts = \(old.attempt)
                RETURNING event_id
                """)
            guard let row = rows.first else { return false }
            if let change = broadcasts, let eventID = try row.decode(Int?.self, column: "event_id") {
                switch change {
                case .stop: try await OutboxWriter.stopBroadcasting(eventID: eventID, on: tx)
                case .resume: try await OutboxWriter.resumeBroadcasting(eventID: eventID, on: tx)
                }
            }
            return true
        }
    }

    /// Flags the event channel_lost and drops its outbox row (`OutboxWriter.stopBroadcasting`): an operator deleted
    /// its live channel.
    public func stopBroadcasting(eventID: Int) async throws {
        try await pool.withConnection { try await OutboxWriter.stopBroadcasting(eventID: eventID, on: $0) }
    }

    /// Starts deleting an 'unknown' channel (the opt-in `--delete-unknown`): it becomes 'deleting'
    /// with attempt 1, driven from then on by `ChannelLifecycle(state: .deleting, attempt: 1)`.
    /// Returns false when it is no longer 'unknown'.
    @discardableResult
    public func beginDeletingUnknown(
        channelID: Int, inFlightTimeout: TimeInterval = 120, fence: LeaseGrant? = nil,
        now: Date? = nil
    ) async throws -> Bool {
        try await pool.withTransaction { tx in
            try await LeaderLeaseRepository.requireHeld(fence, now: now, on: tx)
            return try await tx.execute(
                """
                UPDATE channels SET state = \(ChannelLifecycle.State.deleting.sql), attempts = 1,
                    next_attempt_at = coalesce(\(now), now()) + make_interval(secs => \(inFlightTimeout)), updated_at = now()
                WHERE id = \(channelID) AND state = \(StoredChannelState.unknown.sql)
                """) == 1
        }
    }

    /// The app's channels that may exist at APNs (the quota's states, unknown ones included), oldest first.
    public func atAPNs(appID: Int) async throws -> [ChannelRecord] {
        try await pool.query(
            """
            SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels
            WHERE app_id = \(appID) AND state IN \(StoredChannelState.quotaStates.sql) ORDER BY id
            """
        ).map(ChannelRecord.init(row:))
    }

    /// Channels of the app that count against Apple's quota (lifecycle states that may exist at APNs, and unknown ones).
    public func quotaCount(appID: Int) async throws -> Int {
        try await pool.query(
            """
            SELECT count(*) AS n FROM channels WHERE app_id = \(appID) AND state IN \(StoredChannelState.quotaStates.sql)
            """)[0].decode(Int.self, column: "n")
    }

    /// Channels of the app in the quota's states whose event starts after `date`: those an app asked for
    /// before the lead time (`PUT /v1/events/{id}/channel`), which `--channel-request-share` bounds.
    public func quotaCount(appID: Int, eventsStartingAfter date: Date) async throws -> Int {
        try await pool.query(
            """
            SELECT count(*) AS n FROM channels c JOIN events e ON e.id = c.event_id
            WHERE c.app_id = \(appID) AND c.state IN \(StoredChannelState.quotaStates.sql) AND e.starts_at > \(date)
            """)[0].decode(Int.self, column: "n")
    }

    /// What the scheduler should act on at `now` (the database clock when nil), at most `limit` of each kind.
    /// Each read goes through a partial index, so a sweep costs what is due, not what is live: events
    /// become live only once they have a channel (`EventRepository.markStarted`), so only scheduled ones
    /// can need one, and ending past `ends_at` is a range on `events_to_end` or `events_to_start`.
    public func dueWork(
        leadTime: TimeInterval, deleteDelay: TimeInterval, endGrace: TimeInterval,
        now: Date? = nil, limit: Int = 100
    ) async throws -> SchedulerWork {
        let statements = Self.dueWorkStatements(leadTime: leadTime, deleteDelay: deleteDelay, endGrace: endGrace, now: now, limit: limit)
        return try await pool.withTransaction(isolation: .repeatableRead) { tx in
            var work = SchedulerWork()
            for (kind, statement) in statements.events { work[keyPath: kind] = try await tx.query(statement).map(EventRecord.init(row:)) }
            for (kind, statement) in statements.channels { work[keyPath: kind] = try await tx.query(statement).map(ChannelRecord.init(row:)) }
            return work
        }
    }

    /// The reads of `dueWork`, one statement per kind of work, each through a partial index.
    static func dueWorkStatements(
        leadTime: TimeInterval, deleteDelay: TimeInterval, endGrace: TimeInterval, now: Date?,
        limit: Int
    ) -> (
        events: [(WritableKeyPath<SchedulerWork, [EventRecord]>, PostgresQuery)],
        channels: [(WritableKeyPath<SchedulerWork, [ChannelRecord]>, PostgresQuery)]
    ) {
        func channels(_ condition: PostgresQuery) -> PostgresQuery {
            "SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels WHERE \(fragment: condition) ORDER BY id LIMIT \(limit)"
        }
        let events: [(WritableKeyPath<SchedulerWork, [EventRecord]>, PostgresQuery)] = [
            (
                \.eventsNeedingChannel,
                """
                SELECT \(unsafeRaw: EventRecord.columns) FROM events e
                WHERE e.status IN \(EventLifecycle.toStartStates.sql) AND NOT e.channel_lost
                  AND (e.ends_at IS NULL OR e.ends_at > coalesce(\(now), now()))
                  AND (e.starts_at <= coalesce(\(now), now()) + make_interval(secs => \(leadTime))
                       OR EXISTS (SELECT 1 FROM outbox o WHERE o.event_id = e.id))
                  AND NOT EXISTS (SELECT 1 FROM channels c WHERE c.event_id = e.id AND \(fragment: Self.ofCurrentRound))
                ORDER BY e.starts_at, e.id LIMIT \(limit)
                """
            ),
            (
                \.eventsToEnd,
                """
                SELECT \(unsafeRaw: EventRecord.columns) FROM events e
                WHERE e.ends_at <= coalesce(\(now), now()) - make_interval(secs => \(endGrace))
                  AND (e.status = \(EventStatus.live.sql)
                       OR (e.status IN \(EventLifecycle.toStartStates.sql) AND e.starts_at <= coalesce(\(now), now()) - make_interval(secs => \(endGrace))))
                  AND NOT EXISTS (SELECT 1 FROM updates u WHERE u.event_id = e.id AND u.action = \(UpdateAction.end.sql))
                ORDER BY e.ends_at, e.id LIMIT \(limit)
                """
            ),
            (
                \.endsWithoutChannel,
                """
                SELECT \(unsafeRaw: EventRecord.columns) FROM events e
                WHERE e.status IN \(EventLifecycle.endingStates.sql)
                  AND NOT EXISTS (SELECT 1 FROM channels c WHERE c.event_id = e.id
                                  AND c.state IN \(ChannelLifecycle.endCarryingStates.sql))
                ORDER BY e.id LIMIT \(limit)
                """
            ),
        ]
        let channelReads: [(WritableKeyPath<SchedulerWork, [ChannelRecord]>, PostgresQuery)] = [
            (\.plannedChannels, channels("state = \(ChannelLifecycle.State.planned.sql)")),
            (\.retriesDue, channels("state IN \(ChannelLifecycle.requestStates.sql) AND next_attempt_at <= coalesce(\(now), now())")),
            (\.unresolvedCreates, channels("state = \(ChannelLifecycle.State.createUnknown.sql)")),
            (
                \.deletionsDue,
                channels(
                    """
                    state IN \(ChannelLifecycle.deleteDueStates.sql) AND ended_at <= coalesce(\(now), now()) - make_interval(secs => \(deleteDelay))
                    """)
            ),
        ]
        return (events, channelReads)
    }

    /// What a reconcile of the app would find in Apple's list `apnsChannelIDs`, changing nothing.
    public func reconcilePreview(appID: Int, apnsChannelIDs listed: [String]) async throws -> ReconcilePreview {
        let rows = try await pool.query(
            """
            SELECT id, apns_channel_id, state FROM channels WHERE app_id = \(appID) AND apns_channel_id IS NOT NULL ORDER BY id
            """
        ).map { row in
            (
                id: try row.decode(Int.self, column: "id"), apnsID: try row.decode(String.self, column: "apns_channel_id"),
                state: try row.decodeChannelState()
            )
        }
        let listedSet = Set(listed)
        let recorded = Set(rows.map(\.apnsID))
        let expected = Set(ChannelLifecycle.listedStates.map(StoredChannelState.lifecycle))
        return ReconcilePreview(
            appID: appID,
            unrecorded: listed.filter { !recorded.contains($0) },
            unknown: rows.filter { $0.state == .unknown && listedSet.contains($0.apnsID) }.map(\.apnsID),
            missing: rows.filter { expected.contains($0.state) && !listedSet.contains($0.apnsID) }.map(\.id),
            resurrected: rows.filter { $0.state == .lifecycle(.deleted) && listedSet.contains($0.apnsID) }.map(\.id))
    }

    /// Compares Apple's list of the app's channel ids with the database: records unknown ids as
    /// 'unknown' (first_seen_at = now; storage policy 'none' as a placeholder, Apple's list has none),
    /// and reports unknown, missing and resurrected channels. Changes no known channel's state: the
    /// caller drives ChannelLifecycle with the report and persists through `transition`.
    public func reconcile(
        appID: Int, apnsChannelIDs: [String], fence: LeaseGrant? = nil,
        now: Date? = nil
    ) async throws -> ReconcileReport {
        try await pool.withTransaction { tx in
            try await LeaderLeaseRepository.requireHeld(fence, now: now, on: tx)
            let newlyRecorded = try await tx.query(
                """
                INSERT INTO channels (app_id, apns_channel_id, storage_policy, state, first_seen_at)
                SELECT \(appID), listed, 'none', \(StoredChannelState.unknown.sql), coalesce(\(now), now())
                FROM unnest(\(apnsChannelIDs)::text[]) AS listed
                ON CONFLICT (app_id, apns_channel_id) DO NOTHING
                RETURNING \(unsafeRaw: ChannelRecord.columns)
                """
            ).map(ChannelRecord.init(row:))
            let unknown = try await tx.query(
                """
                SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels
                WHERE app_id = \(appID) AND state = \(StoredChannelState.unknown.sql) AND apns_channel_id = ANY (\(apnsChannelIDs)::text[])
                ORDER BY first_seen_at, id
                """
            ).map(ChannelRecord.init(row:))
            let missing = try await tx.query(
                """
                SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels
                WHERE app_id = \(appID) AND state IN \(ChannelLifecycle.listedStates.sql)
                  AND NOT (apns_channel_id = ANY (\(apnsChannelIDs)::text[]))
                ORDER BY id
                """
            ).map(ChannelRecord.init(row:))
            // Unknown channels gone from Apple's list need nothing more: they are deleted.
            try await tx.query(
                """
                UPDATE channels SET state = \(ChannelLifecycle.State.deleted.sql), deleted_at = coalesce(\(now), now()), updated_at = now()
                WHERE app_id = \(appID) AND state = \(StoredChannelState.unknown.sql) AND NOT (apns_channel_id = ANY (\(apnsChannelIDs)::text[]))
                """)
            let resurrected = try await tx.query(
                """
                SELECT \(unsafeRaw: ChannelRecord.columns) FROM channels
                WHERE app_id = \(appID) AND state = \(ChannelLifecycle.State.deleted.sql) AND apns_channel_id = ANY (\(apnsChannelIDs)::text[])
                ORDER BY id
                """
            ).map(ChannelRecord.init(row:))
            return ReconcileReport(newlyRecorded: newlyRecorded, unknown: unknown, missing: missing, resurrected: resurrected)
        }
    }
}
