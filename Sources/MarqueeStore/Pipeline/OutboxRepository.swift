// The dispatcher's side of the outbox. A claim is a LEASE written on the outbox row (claimed_by,
// claim_token, claimed_until; Sql/0002), taken in a short transaction with FOR UPDATE SKIP LOCKED,
// not a row lock held while APNs answers:
// * ingest upserts the same row; a lock held across an APNs round trip would stall every ingest of
//   that event behind it (and pin a pooled connection per batch);
// * an instance killed with -9, or cut off by a partition, leaves a lease that expires on its own;
//   a held transaction would linger until the server noticed the dead connection;
// * the claim token makes every later write conditional on still owning the row, so a slow instance
//   whose lease expired and was taken over cannot delete or reschedule the new owner's work.
// The outbox has one row per event and an event has at most one live channel, so claiming a row is
// claiming the channel: one channel is never sent by two instances at once while leases hold.
import Foundation
import MarqueeCore
import Postgres

/// A pending update of a claimed event, for `ConflationPolicy` (oldest first).
public struct PendingUpdate: Sendable, Equatable {
    public var id: Int
    public var priority: RequestedPriority
    public var alert: JSONValue?
    public var occurredAt: Date
}

/// The update a claimed outbox row points at (the event's newest accepted one).
public struct OutboxUpdate: Sendable, Equatable {
    public var id: Int
    public var action: UpdateAction
    /// The full content-state (a merge patch was applied at ingest).
    public var contentState: JSONValue
    public var alert: JSONValue?
    public var staleDate: Date?
    public var dismissalDate: Date?
    public var relevanceScore: Double?
    public var priority: RequestedPriority
    public var occurredAt: Date
    /// When ingest accepted it (the start of the ingest-to-APNs latency).
    public var receivedAt: Date
}

/// One event's broadcast work, claimed by this instance until `claimedUntil`.
public struct ClaimedBroadcast: Sendable, Equatable {
    public var outboxID: Int
    /// Proves ownership to the record methods.
    public var claimToken: UUID
    public var claimedUntil: Date
    /// Failed attempts so far (for the backoff of the next one).
    public var attempts: Int
    public var eventID: Int
    public var appID: Int
    public var channelID: Int
    public var apnsChannelID: String
    public var storagePolicy: MessageStoragePolicy
    public var channelState: ChannelLifecycle.State
    /// The channel's last aps.timestamp: the next must be above it (`TimestampSequencer.next(after:now:)`).
    public var lastApsTimestamp: Int64?
    /// When APNs last accepted a broadcast on the channel (for the one-per-second pacing).
    public var lastBroadcastAt: Date?
    public var update: OutboxUpdate
    /// Every pending update of the event up to `update`, oldest first (`update` last).
    public var pending: [PendingUpdate]
}

/// What a recorded broadcast left behind.
public enum BroadcastOutcome: Sendable, Equatable {
    /// The outbox row is gone: the event's newest state went out.
    case completed
    /// A newer update arrived while sending: the row stays, due after the given delay.
    case newerPending
    /// The claim had expired and another instance owns the row now; the send is recorded, the row untouched.
    case claimLost
}

/// The dispatcher's outbox operations: claim due work, record each outcome atomically.
public struct OutboxRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Claims up to `limit` due outbox rows of events whose channel is open (or ending), oldest due
    /// first, skipping rows other instances are claiming and rows whose `not_before` (an end's `at`) is
    /// ahead, for `lease` seconds. `now` overrides the
    /// database clock (tests).
    public func claim(instance: String, limit: Int, lease: TimeInterval, now: Date? = nil) async throws -> [ClaimedBroadcast] {
        try await pool.withTransaction { tx in
            // Two statements on purpose: the claiming UPDATE may wait on an ingest's row lock and then
            // see the row's new update_id (READ COMMITTED re-check), while its own snapshot predates that
            // update; joining `updates` in the same statement would silently drop the row. The second
            // statement takes a new snapshot, and the rows stay locked by this transaction meanwhile.
            let claimedIDs = try await tx.query("""
                WITH due AS (
                    SELECT o.id, c.id AS channel_id
                    FROM outbox o
                    JOIN events e ON e.id = o.event_id
                    JOIN channels c ON c.event_id = o.event_id AND c.state IN ('open', 'ending')
                    WHERE o.next_attempt_at <= coalesce(\(now), now())
                      AND (o.claimed_until IS NULL OR o.claimed_until <= coalesce(\(now), now()))
                      AND (o.not_before IS NULL OR o.not_before <= coalesce(\(now), now()))
                      AND NOT e.channel_lost
                    ORDER BY o.next_attempt_at, o.id
                    LIMIT \(limit)
                    FOR UPDATE OF o SKIP LOCKED
                )
                UPDATE outbox o SET claimed_by = \(instance), claim_token = gen_random_uuid(),
                    claimed_until = coalesce(\(now), now()) + make_interval(secs => \(lease)),
                    channel_id = due.channel_id, updated_at = now()
                FROM due WHERE o.id = due.id
                RETURNING o.id
                """).map { String(try $0.decode(Int.self, column: "id")) }
            guard !claimedIDs.isEmpty else { return [] }
            let rows = try await tx.query("""
                SELECT o.id AS outbox_id, o.claim_token, o.claimed_until, o.attempts, o.event_id, e.app_id,
                       c.id AS channel_id, c.apns_channel_id, c.storage_policy, c.state AS channel_state, c.last_aps_timestamp,
                       (SELECT d.sent_at FROM deliveries d
                         WHERE d.channel_id = c.id AND d.kind = 'broadcast' AND d.status = 200
                         ORDER BY d.sent_at DESC LIMIT 1) AS last_broadcast_at,
                       u.id AS update_id, u.action, u.content_state, u.alert, u.stale_date, u.dismissal_date,
                       u.relevance_score, u.priority, u.occurred_at, u.received_at
                FROM outbox o
                JOIN events e ON e.id = o.event_id
                JOIN channels c ON c.id = o.channel_id
                JOIN updates u ON u.id = o.update_id
                WHERE o.id = ANY (\(claimedIDs)::bigint[])
                ORDER BY o.next_attempt_at, o.id
                """)
            guard !rows.isEmpty else { return [] }
            var claims = try rows.map { row in
                ClaimedBroadcast(
                    outboxID: try row.decode(Int.self, column: "outbox_id"),
                    claimToken: try row.decode(UUID.self, column: "claim_token"),
                    claimedUntil: try row.decode(Date.self, column: "claimed_until"),
                    attempts: try row.decode(Int.self, column: "attempts"),
                    eventID: try row.decode(Int.self, column: "event_id"),
                    appID: try row.decode(Int.self, column: "app_id"),
                    channelID: try row.decode(Int.self, column: "channel_id"),
                    apnsChannelID: try row.decode(String.self, column: "apns_channel_id"),
                    storagePolicy: try row.decodeRaw(MessageStoragePolicy.self, column: "storage_policy"),
                    channelState: try row.decodeRaw(ChannelLifecycle.State.self, column: "channel_state"),
                    lastApsTimestamp: try row.decode(Int64?.self, column: "last_aps_timestamp"),
                    lastBroadcastAt: try row.decode(Date?.self, column: "last_broadcast_at"),
                    update: OutboxUpdate(
                        id: try row.decode(Int.self, column: "update_id"),
                        action: try row.decode(UpdateAction.self, column: "action"),
                        contentState: try row.decodeJSON(column: "content_state") ?? [:],
                        alert: try row.decodeJSON(column: "alert"),
                        staleDate: try row.decode(Date?.self, column: "stale_date"),
                        dismissalDate: try row.decode(Date?.self, column: "dismissal_date"),
                        relevanceScore: try row.decode(Double?.self, column: "relevance_score"),
                        priority: try row.decodeRaw(RequestedPriority.self, column: "priority"),
                        occurredAt: try row.decode(Date.self, column: "occurred_at"),
                        receivedAt: try row.decode(Date.self, column: "received_at")),
                    pending: [])
            }
            let pending = try await tx.query("""
                SELECT event_id, id, priority, alert, occurred_at FROM updates
                WHERE event_id = ANY (\(claims.map { String($0.eventID) })::bigint[]) AND disposition = 'pending'
                ORDER BY event_id, id
                """)
            var byEvent: [Int: [PendingUpdate]] = [:]
            for row in pending {
                byEvent[try row.decode(Int.self, column: "event_id"), default: []].append(PendingUpdate(
                    id: try row.decode(Int.self, column: "id"),
                    priority: try row.decodeRaw(RequestedPriority.self, column: "priority"),
                    alert: try row.decodeJSON(column: "alert"),
                    occurredAt: try row.decode(Date.self, column: "occurred_at")))
            }
            for index in claims.indices {
                claims[index].pending = (byEvent[claims[index].eventID] ?? []).filter { $0.id <= claims[index].update.id }
            }
            return claims
        }
    }

    /// Records a broadcast APNs accepted, atomically: the channel's aps.timestamp (refused with
    /// `apsTimestampNotIncreasing` unless strictly above the last, and then nothing is recorded),
    /// the sent update 'broadcast' and every older pending one 'conflated', the delivery row, and the
    /// outbox row deleted, or, when a newer update arrived meanwhile, released and due after
    /// `nextAttemptDelay`. An `end` update also moves the channel to 'ended' and the event to 'ended'.
    @discardableResult
    public func recordBroadcast(_ claim: ClaimedBroadcast, delivery: DeliveryDraft, apsTimestamp: Int64,
                                nextAttemptDelay: TimeInterval = 0, now: Date? = nil) async throws -> BroadcastOutcome {
        try await pool.withTransaction { tx in
            let stamped = try await tx.execute("""
                UPDATE channels SET last_aps_timestamp = \(apsTimestamp), updated_at = now()
                WHERE id = \(claim.channelID) AND (last_aps_timestamp IS NULL OR last_aps_timestamp < \(apsTimestamp))
                """)
            guard stamped == 1 else {
                throw PipelineError.apsTimestampNotIncreasing(channelID: claim.channelID, attempted: apsTimestamp)
            }
            try await tx.query("""
                UPDATE updates SET disposition = CASE WHEN id = \(claim.update.id) THEN 'broadcast' ELSE 'conflated' END,
                                   disposed_at = now()
                WHERE event_id = \(claim.eventID) AND disposition = 'pending' AND id <= \(claim.update.id)
                """)
            var sent = delivery
            sent.apsTimestamp = apsTimestamp
            if sent.updateID == nil { sent.updateID = claim.update.id }
            if sent.channelID == nil { sent.channelID = claim.channelID }
            try await DeliveryRepository.insert(sent, on: tx)
            if claim.update.action == .end {
                try await tx.query("""
                    WITH ended AS (
                        UPDATE channels SET state = 'ended', attempts = 0, next_attempt_at = NULL,
                            ended_at = coalesce(\(now), now()), updated_at = now()
                        WHERE id = \(claim.channelID) AND state IN ('open', 'ending')
                    )
                    UPDATE events SET status = 'ended', updated_at = now()
                    WHERE id = \(claim.eventID) AND status <> 'cancelled'
                    """)
            }
            let deleted = try await tx.execute("""
                DELETE FROM outbox WHERE id = \(claim.outboxID) AND claim_token = \(claim.claimToken) AND update_id = \(claim.update.id)
                """)
            if deleted == 1 { return .completed }
            let released = try await Self.release(claim, attemptsSQL: "0", delay: nextAttemptDelay, error: nil, now: now, on: tx)
            return released ? .newerPending : .claimLost
        }
    }

    /// Records a failure worth retrying (429, 5xx, timeout, I/O): the delivery row, the attempt
    /// counted, and the row released, due after `retryAfter` (from `RetryBackoff`). Returns false
    /// when the claim was lost meanwhile (the delivery is recorded all the same).
    @discardableResult
    public func recordRetryableFailure(_ claim: ClaimedBroadcast, delivery: DeliveryDraft, retryAfter: TimeInterval,
                                       now: Date? = nil) async throws -> Bool {
        try await pool.withTransaction { tx in
            try await DeliveryRepository.insert(Self.filled(delivery, claim), on: tx)
            return try await Self.release(claim, attemptsSQL: "attempts + 1", delay: retryAfter,
                                          error: delivery.reason ?? delivery.status.map { "HTTP \($0)" }, now: now, on: tx)
        }
    }

    /// Records a permanent refusal: the delivery row, and
    /// * `channelNotRegistered`: the channel 'lost', the event flagged `channel_lost`, its outbox row
    ///   dropped (broadcasting stops until an operator acts);
    /// * otherwise (the payload was refused): the outbox row dropped unless a newer update arrived;
    ///   the refused update stays 'pending' and is conflated by the next successful broadcast.
    public func recordPermanentFailure(_ claim: ClaimedBroadcast, delivery: DeliveryDraft,
                                       channelNotRegistered: Bool, now: Date? = nil) async throws {
        try await pool.withTransaction { tx in
            let reason = delivery.reason ?? delivery.status.map { "HTTP \($0)" } ?? "refused"
            try await DeliveryRepository.insert(Self.filled(delivery, claim), on: tx)
            if channelNotRegistered {
                try await tx.query("""
                    UPDATE channels SET state = 'lost', attempts = 0, next_attempt_at = NULL, last_error = \(reason),
                        last_error_at = coalesce(\(now), now()), updated_at = now()
                    WHERE id = \(claim.channelID) AND state IN ('open', 'ending')
                    """)
                try await ChannelRepository.stopBroadcasting(eventID: claim.eventID, on: tx)
                return
            }
            let deleted = try await tx.execute("""
                DELETE FROM outbox WHERE id = \(claim.outboxID) AND claim_token = \(claim.claimToken) AND update_id = \(claim.update.id)
                """)
            if deleted == 0 {
                try await Self.release(claim, attemptsSQL: "0", delay: 0, error: reason, now: now, on: tx)
            }
        }
    }

    /// Gives a claim back unsent, due again after `delay` (the one-per-second pacing of
    /// `ConflationPolicy` said "not yet"); attempts are unchanged. False when the claim was lost.
    @discardableResult
    public func postpone(_ claim: ClaimedBroadcast, by delay: TimeInterval, now: Date? = nil) async throws -> Bool {
        try await pool.withConnection { tx in
            try await Self.release(claim, attemptsSQL: "attempts", delay: delay, error: nil, now: now, on: tx)
        }
    }

    /// Gives claims back unchanged (shutdown), so another instance can take them at once.
    public func release(_ claims: [ClaimedBroadcast]) async throws {
        guard !claims.isEmpty else { return }
        try await pool.execute("""
            UPDATE outbox SET claimed_by = NULL, claim_token = NULL, claimed_until = NULL, updated_at = now()
            WHERE claim_token = ANY (\(claims.map { $0.claimToken.uuidString.lowercased() })::uuid[])
            """)
    }

    /// Clears the claim if still owned, setting attempts (SQL expression) and the next due time.
    @discardableResult
    private static func release(_ claim: ClaimedBroadcast, attemptsSQL: String, delay: TimeInterval, error: String?,
                                now: Date?, on tx: PostgresConnection) async throws -> Bool {
        try await tx.execute("""
            UPDATE outbox SET claimed_by = NULL, claim_token = NULL, claimed_until = NULL,
                attempts = \(unsafeRaw: attemptsSQL), last_error = coalesce(\(error), last_error),
                next_attempt_at = coalesce(\(now), now()) + make_interval(secs => \(max(0, delay))), updated_at = now()
            WHERE id = \(claim.outboxID) AND claim_token = \(claim.claimToken)
            """) == 1
    }

    private static func filled(_ delivery: DeliveryDraft, _ claim: ClaimedBroadcast) -> DeliveryDraft {
        var filled = delivery
        if filled.channelID == nil { filled.channelID = claim.channelID }
        if filled.updateID == nil { filled.updateID = claim.update.id }
        return filled
    }
}
