// The dispatcher's side of the outbox. A claim is a LEASE written on the outbox row (claimed_by,
// claim_token, claimed_until; Sql/0002), taken by one UPDATE with FOR UPDATE SKIP LOCKED, not a row
// lock held while APNs answers:
// * ingest upserts the same row; a lock held across an APNs round trip would stall every ingest of
//   that event behind it (and pin a pooled connection per batch);
// * an instance killed with -9, or cut off by a partition, leaves a lease that expires on its own;
//   a held transaction would linger until the server noticed the dead connection. A claim also ends
//   with its holder: once the holder's heartbeat (Sql/0021, InstanceHeartbeatRepository) has lapsed,
//   its claims are free at once, so the lease is only the upper bound;
// * the claim token makes every later write conditional on still owning the row, so a slow instance
//   whose lease expired and was taken over cannot delete or reschedule the new owner's work.
// The outbox has one row per event and an event has at most one live channel, so claiming a row is
// claiming the channel: one channel is never sent by two instances at once while leases hold.
// Every round trip costs CPU on both sides, so each outcome is recorded by ONE statement (a chain of
// data-modifying CTEs, atomic without BEGIN/COMMIT), and a claim is two statements.
import Foundation
import MarqueeCore
import Postgres

/// The dispatcher's outbox operations: claim due work, record each outcome atomically.
public struct OutboxRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Claims up to `limit` due outbox rows of events whose channel is open (or ending), oldest due
    /// first, skipping rows other instances are claiming (a claim whose lease ran out, or whose holder's
    /// heartbeat lapsed, is free) and rows whose `not_before` (an end's `at`) is ahead, for `lease`
    /// seconds. `now` overrides the database clock (tests).
    public func claim(instance: String, limit: Int, lease: TimeInterval, now: Date? = nil) async throws -> [ClaimedBroadcast] {
        try await claimBatch(instance: instance, limit: limit, lease: lease, now: now).claims
    }

    /// `claim`, and with `pacing` (seconds) a due row whose channel APNs accepted a broadcast on less
    /// than `pacing` ago, and which has no urgent pending update (an alert or `high`: `ConflationPolicy`
    /// sends those at once) and is not marked urgent (`next_attempt_at` at the epoch), is not claimed
    /// but made due when the pacing allows; the batch says the earliest such time.
    public func claimBatch(
        instance: String, limit: Int, lease: TimeInterval, pacing: TimeInterval? = nil,
        now: Date? = nil
    ) async throws -> ClaimBatch {
        // Two statements, no transaction. The claiming UPDATE may wait on an ingest's row lock and then
        // see the row's new update_id (READ COMMITTED re-check) while its own snapshot predates that
        // update; joining `updates` in the same statement would silently drop the row. The second
        // statement takes a new snapshot. The claim is a lease, not a lock, so nothing needs to stay
        // locked between the two: the second reads the rows that still carry this claim's tokens, with
        // whatever update_id they have by then (the record methods check update_id again).
        // The due rows are found by walking outbox_due (next_attempt_at) in order: the LIMIT inside the
        // LATERAL subquery keeps the planner from turning it into a join over every open channel, and
        // `o.id = ANY (ARRAY(...))` has the UPDATE find its rows by primary key, not by hashing the table.
        let taken = try await pool.query(Self.claimStatement(instance: instance, limit: limit, lease: lease, pacing: pacing, now: now))
        var claimed: [(id: String, token: String)] = []
        var pacedUntil: Date?
        var takenOver: [String] = []
        for row in taken {
            if let token = try row.decode(UUID?.self, column: "claim_token") {
                claimed.append((String(try row.decode(Int.self, column: "id")), token.uuidString.lowercased()))
                if let holder = try row.decode(String?.self, column: "previous_holder") { takenOver.append(holder) }
            } else {
                let due = try row.decode(Date.self, column: "next_attempt_at")
                pacedUntil = min(pacedUntil ?? due, due)
            }
        }
        guard !claimed.isEmpty else { return ClaimBatch(claims: [], taken: taken.count, pacedUntil: pacedUntil) }
        // One row per pending update of each claim (oldest first; one row with NULLs when none), the
        // claim's own columns repeated, its update's bulky ones only on the row of the newest pending.
        let rows = try await pool.query(Self.claimedRowsStatement(ids: claimed.map(\.id), tokens: claimed.map(\.token)))
        var claims: [ClaimedBroadcast] = []
        var pending: [Int: [PendingUpdate]] = [:]
        for row in rows {
            let outboxID = try row.decode(Int.self, column: "outbox_id")
            if let id = try row.decode(Int?.self, column: "pending_id") {
                pending[outboxID, default: []].append(
                    PendingUpdate(
                        id: id,
                        priority: try row.decodeRaw(RequestedPriority.self, column: "pending_priority"),
                        alert: try row.decodeJSON(column: "pending_alert"),
                        occurredAt: try row.decode(Date.self, column: "pending_occurred_at")))
            }
            guard try row.decode(Bool.self, column: "carries_update") else { continue }
            claims.append(
                ClaimedBroadcast(
                    outboxID: outboxID,
                    claimToken: try row.decode(UUID.self, column: "claim_token"),
                    claimedUntil: try row.decode(Date.self, column: "claimed_until"),
                    attempts: try row.decode(Int.self, column: "attempts"),
                    eventID: try row.decode(Int.self, column: "event_id"),
                    appID: try row.decode(Int.self, column: "app_id"),
                    attributeTypeID: try row.decode(Int.self, column: "attribute_type_id"),
                    channelID: try row.decode(Int.self, column: "channel_id"),
                    apnsChannelID: try row.decode(String.self, column: "apns_channel_id"),
                    storagePolicy: try row.decodeRaw(MessageStoragePolicy.self, column: "storage_policy"),
                    channelState: try row.decodeRaw(ChannelLifecycle.State.self, column: "channel_state"),
                    lastApsTimestamp: try row.decode(Int64?.self, column: "last_aps_timestamp"),
                    apsTimestamp: try row.decode(Int64?.self, column: "fixed_aps_timestamp"),
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
                    pending: [], freshness: try row.freshnessPolicy(), lastAlertAt: try row.decode(Date?.self, column: "last_alert_at")))
        }
        for index in claims.indices { claims[index].pending = pending[claims[index].outboxID] ?? [] }
        return ClaimBatch(claims: claims, taken: taken.count, pacedUntil: pacedUntil, takenOver: takenOver)
    }

    /// Records a broadcast APNs accepted, atomically: the channel's aps.timestamp (refused with
    /// `apsTimestampNotIncreasing` unless strictly above the last, and then nothing is recorded) and
    /// `last_broadcast_at`, the sent update 'broadcast' and every older pending one 'conflated', the
    /// delivery row, and the outbox row deleted, or, when a newer update arrived meanwhile, released
    /// and due after `nextAttemptDelay` (at once if the row was made urgent). An `end` update also
    /// moves the channel to 'ended' and the event to 'ended'. `last_broadcast_at` becomes `sentAt`
    /// (when the send began: the pacing's reference, as in the dispatcher's memory), else `now`.
    @discardableResult
    public func recordBroadcast(
        _ claim: ClaimedBroadcast, delivery: DeliveryDraft, apsTimestamp: Int64,
        nextAttemptDelay: TimeInterval = 0, sentAt: Date? = nil, now: Date? = nil
    ) async throws -> BroadcastOutcome {
        try await recordBroadcasts(
            [
                BroadcastRecord(
                    claim: claim, delivery: delivery, apsTimestamp: apsTimestamp,
                    nextAttemptDelay: nextAttemptDelay, sentAt: sentAt)
            ], now: now)[0].get()
    }

    /// `recordBroadcast` for several claims (of different channels) in one statement: each record is
    /// applied or refused on its own, exactly as alone. Returns each one's outcome, in order; throws
    /// only when the statement failed (then nothing was recorded).
    public func recordBroadcasts(_ records: [BroadcastRecord], now: Date? = nil) async throws -> [Result<BroadcastOutcome, PipelineError>] {
        precondition(Set(records.map(\.claim.channelID)).count == records.count, "one record per channel in a batch")
        guard !records.isEmpty else { return [] }
        let input: JSONValue = .array(
            records.enumerated().map { index, record in
                let claim = record.claim
                let sent = Self.filled(record.delivery, claim)
                func optional<T>(_ value: T?, _ json: (T) -> JSONValue) -> JSONValue { value.map(json) ?? .null }
                return [
                    "n": .int(Int64(index)), "outbox_id": .int(Int64(claim.outboxID)), "claim_token": .string(claim.claimToken.uuidString),
                    "channel_id": .int(Int64(sent.channelID!)), "event_id": .int(Int64(claim.eventID)), "update_id": .int(Int64(sent.updateID!)),
                    "aps_timestamp": .int(record.apsTimestamp), "sent_at": optional(record.sentAt) { .double($0.timeIntervalSince1970) },
                    "ends": .bool(claim.update.action == .end), "delay": .double(max(0, record.nextAttemptDelay)),
                    "app_id": .int(Int64(sent.appID)), "apns_request_id": optional(sent.apnsRequestID) { .string($0.uuidString) },
                    "apns_unique_id": optional(sent.apnsUniqueID) { .string($0.uuidString) },
                    "status": optional(sent.status) { .int(Int64($0)) }, "reason": optional(sent.reason) { .string($0) },
                    "latency_us": optional(sent.latencyMicroseconds) { .int($0) }, "priority": optional(sent.priority) { .int(Int64($0)) },
                    "attempt": .int(Int64(sent.attempt)), "alert_update_id": optional(record.alertUpdateID) { .int(Int64($0)) },
                ]
            })
        // One statement, so atomic without a transaction: every step after the stamp is conditioned on
        // it (joined to `stamped`). All CTEs share one snapshot and no row is modified twice (the end
        // transition is part of the stamp; a batch has one record per channel). The outbox row is deleted
        // while it still points at the sent update, or released when it points at a newer one: mutually
        // exclusive predicates. The main SELECT reads the CTEs in the order of the old transaction's
        // statements, so rows are locked in that order (channels, updates, events, then outbox rows, as
        // ingest locks the event first). A batch pays the per-statement costs (planning the executor,
        // compiling the tables' CHECK constraints, the commit) once. The LIMIT tells the planner there are
        // few records: it guesses 100 rows for jsonb_to_recordset, and with that it hash-joined a
        // sequential scan of channels and two of outbox (hundreds of pages under churn) where a handful of
        // primary-key lookups do (Scripts/bench service, pg_stat_statements: 145 buffer hits and 0.34 ms per
        // record before, 57 and 0.19 ms with the LIMIT). See `recordRowsEstimate` for why it is not the count.
        let row = try await pool.query(Self.recordStatement(input: input, count: records.count, now: now))[0]
        func indices(_ column: String) throws -> Set<Int> {
            Set(try row.decode(String.self, column: column).split(separator: ",").compactMap { Int($0) })
        }
        let stamped = try indices("stamped")
        let deleted = try indices("deleted")
        let released = try indices("released")
        var outcomes: [Result<BroadcastOutcome, PipelineError>] = []
        for (index, record) in records.enumerated() {
            guard stamped.contains(index) else {
                outcomes.append(.failure(.apsTimestampNotIncreasing(channelID: record.claim.channelID, attempted: record.apsTimestamp)))
                continue
            }
            if deleted.contains(index) {
                outcomes.append(.success(.completed))
                continue
            }
            if released.contains(index) {
                outcomes.append(.success(.newerPending))
                continue
            }
            // Neither: the claim was lost, or an ingest committed a newer update_id after this statement's
            // snapshot (the DELETE re-checked the newest row and let go; the release saw the old one). The
            // broadcast is recorded; releasing now, on a new snapshot, tells the two apart.
            let again = try await pool.withConnection { connection in
                try await Self.release(
                    record.claim, attemptsSQL: "0", delay: record.nextAttemptDelay, error: nil, keepUrgent: true,
                    now: now, on: connection)
            }
            outcomes.append(.success(again ? .newerPending : .claimLost))
        }
        return outcomes
    }

    /// Records a failure worth retrying (429, 5xx, timeout, I/O): the delivery row, the attempt
    /// counted, and the row released, due after `retryAfter` (from `RetryBackoff`). Returns false
    /// when the claim was lost meanwhile (the delivery is recorded all the same).
    @discardableResult
    public func recordRetryableFailure(
        _ claim: ClaimedBroadcast, delivery: DeliveryDraft, retryAfter: TimeInterval,
        now: Date? = nil
    ) async throws -> Bool {
        // One statement: the delivery row goes in whether or not the claim is still held.
        try await pool.query(
            """
            WITH delivered AS (
                \(fragment: DeliveryRepository.insertSelect(Self.filled(delivery, claim)))
                RETURNING id
            )
            \(fragment: Self.releaseStatement(claim, attemptsSQL: "attempts + 1", delay: retryAfter,
                                              error: delivery.reason ?? delivery.status.map { "HTTP \($0)" }, now: now))
            RETURNING id
            """
        ).count == 1
    }

    /// Records a permanent refusal: the delivery row, and
    /// * `channelNotRegistered`: the channel 'lost', the event flagged `channel_lost`, its outbox row
    ///   dropped (broadcasting stops until an operator acts);
    /// * otherwise (the payload was refused): the outbox row dropped unless a newer update arrived;
    ///   the refused update stays 'pending' and is conflated by the next successful broadcast.
    /// What ChannelNotRegistered does to a channel that broadcasts, as the lifecycle says (`lost`).
    static let lostState = ChannelLifecycle.sqlState(after: [.channelNotRegistered], from: ChannelLifecycle.broadcastingStates, column: "state")
    /// What an accepted end broadcast does to a channel that broadcasts: an open one is asked to end, then the
    /// end goes (`ended`), as the lifecycle says.
    static let endedState = ChannelLifecycle.sqlState(after: [.endRequested, .endSent], from: ChannelLifecycle.broadcastingStates, column: "c.state")

    public func recordPermanentFailure(
        _ claim: ClaimedBroadcast, delivery: DeliveryDraft,
        channelNotRegistered: Bool, now: Date? = nil
    ) async throws {
        try await pool.withTransaction { tx in
            let reason = delivery.reason ?? delivery.status.map { "HTTP \($0)" } ?? "refused"
            try await DeliveryRepository.insert(Self.filled(delivery, claim), on: tx)
            if channelNotRegistered {
                try await tx.query(
                    """
                    UPDATE channels SET state = \(fragment: Self.lostState), attempts = 0, next_attempt_at = NULL, last_error = \(reason),
                        last_error_at = coalesce(\(now), now()), updated_at = now()
                    WHERE id = \(claim.channelID) AND state IN \(ChannelLifecycle.broadcastingStates.sql)
                    """)
                try await OutboxWriter.stopBroadcasting(eventID: claim.eventID, on: tx)
                return
            }
            let deleted = try await tx.execute(
                """
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
        try await pool.execute(
            """
            UPDATE outbox SET claimed_by = NULL, claim_token = NULL, claimed_until = NULL, updated_at = now()
            WHERE claim_token = ANY (\(claims.map { $0.claimToken.uuidString.lowercased() })::uuid[])
            """)
    }

    /// Gives back, unchanged, every claim `instance` holds except those in `keeping` (claim tokens of sends
    /// still in flight); returns how many. After a claim whose answer was lost (the connection broke after
    /// PostgreSQL ran it), the rows it took are held by a live instance that does not know their tokens:
    /// this frees them at once instead of after their lease.
    @discardableResult
    public func releaseClaims(of instance: String, keeping: [UUID]) async throws -> Int {
        try await pool.execute(
            """
            UPDATE outbox SET claimed_by = NULL, claim_token = NULL, claimed_until = NULL, updated_at = now()
            WHERE claimed_by = \(instance) AND claim_token <> ALL (\(keeping.map { $0.uuidString.lowercased() })::uuid[])
            """)
    }

    /// Clears the claim if still owned, setting attempts (SQL expression) and the next due time.
    @discardableResult
    private static func release(
        _ claim: ClaimedBroadcast, attemptsSQL: String, delay: TimeInterval, error: String?,
        keepUrgent: Bool = false, now: Date?, on connection: PostgresConnection
    ) async throws -> Bool {
        try await connection.execute(
            releaseStatement(
                claim, attemptsSQL: attemptsSQL, delay: delay, error: error,
                keepUrgent: keepUrgent, now: now)) == 1
    }

    /// The UPDATE of `release`: due after `delay`, or, with `keepUrgent`, still at once when an urgent
    /// ingest marked it so (`IngestRepository.urgentDue`).
    private static func releaseStatement(
        _ claim: ClaimedBroadcast, attemptsSQL: String, delay: TimeInterval, error: String?,
        keepUrgent: Bool = false, now: Date?
    ) -> PostgresQuery {
        """
        UPDATE outbox SET claimed_by = NULL, claim_token = NULL, claimed_until = NULL,
            attempts = \(unsafeRaw: attemptsSQL), last_error = coalesce(\(error), last_error),
            next_attempt_at = CASE WHEN \(keepUrgent) AND next_attempt_at <= \(IngestRepository.urgentDue) THEN next_attempt_at
                                   ELSE coalesce(\(now), now()) + make_interval(secs => \(max(0, delay))) END,
            updated_at = now()
        WHERE id = \(claim.outboxID) AND claim_token = \(claim.claimToken)
        """
    }

    // MARK: the statements (static, so `warmUp` runs exactly what the methods run)

    /// Runs the dispatcher's statements once on `connection` with inputs that match no row (a claim of
    /// none, no claimed rows, a record of no broadcast): PostgreSQL parses and plans a statement the first
    /// time each backend runs it, and a fresh pool would otherwise pay for that in its first requests.
    /// A prepared statement is one per text and parameter types, so these are the ones the methods reuse.
    static func warmUp(on connection: PostgresConnection) async throws {
        _ = try await connection.query(claimStatement(instance: "warm-up", limit: 0, lease: 1, pacing: nil, now: nil))
        _ = try await connection.query(claimedRowsStatement(ids: [], tokens: []))
        _ = try await connection.query(recordStatement(input: [], count: 0, now: nil))
    }

    /// The claim's first statement: takes due rows (see `claimBatch`).
    static func claimStatement(instance: String, limit: Int, lease: TimeInterval, pacing: TimeInterval?, now: Date?) -> PostgresQuery {
        """
        WITH due AS (
            SELECT o.id, live.channel_id, live.last_aps_timestamp, o.claimed_by AS previous_holder,
                   CASE WHEN o.next_attempt_at > \(IngestRepository.urgentDue)
                             AND live.last_broadcast_at > coalesce(\(now), now()) - make_interval(secs => \(pacing)::float8)
                             AND NOT EXISTS (
                                 SELECT 1 FROM updates p
                                 WHERE p.event_id = o.event_id AND p.disposition = \(UpdateDisposition.pending.sql) AND p.id <= o.update_id
                                   AND (p.priority = 'high' OR p.alert IS NOT NULL))
                        THEN live.last_broadcast_at + make_interval(secs => \(pacing)::float8) END AS paced_until
            FROM outbox o
            CROSS JOIN LATERAL (
                -- The event's sequence goes on from what the token route sent before the channel opened (Sql/0039).
                SELECT c.id AS channel_id, c.last_broadcast_at,
                       greatest(c.last_aps_timestamp, (SELECT aps_timestamp FROM token_routes WHERE event_id = c.event_id)) AS last_aps_timestamp
                FROM channels c JOIN events e ON e.id = c.event_id
                WHERE c.event_id = o.event_id AND c.state IN \(ChannelLifecycle.broadcastingStates.sql) AND NOT e.channel_lost
                LIMIT 1
            ) live
            WHERE o.next_attempt_at <= coalesce(\(now), now())
              AND (o.claimed_until IS NULL OR o.claimed_until <= coalesce(\(now), now())
                   OR o.claimed_by = ANY (\(fragment: InstanceHeartbeatRepository.lapsedInstances(now: now))))
              AND (o.not_before IS NULL OR o.not_before <= coalesce(\(now), now()))
            ORDER BY o.next_attempt_at, o.id
            LIMIT \(limit)
            FOR UPDATE OF o SKIP LOCKED
        )
        UPDATE outbox o SET
            claimed_by = CASE WHEN due.paced_until IS NULL THEN \(instance) END,
            claim_token = CASE WHEN due.paced_until IS NULL THEN gen_random_uuid() END,
            claimed_until = CASE WHEN due.paced_until IS NULL
                                 THEN coalesce(\(now), now()) + make_interval(secs => \(lease)) END,
            next_attempt_at = coalesce(due.paced_until, o.next_attempt_at),
            aps_timestamp = CASE WHEN due.paced_until IS NOT NULL THEN o.aps_timestamp
                                 WHEN o.aps_timestamp_update_id = o.update_id
                                      AND o.aps_timestamp > coalesce(due.last_aps_timestamp, 0) THEN o.aps_timestamp
                                 ELSE greatest(floor(extract(epoch FROM coalesce(\(now), now())))::bigint,
                                               due.last_aps_timestamp + 1, o.aps_timestamp + 1) END,
            aps_timestamp_update_id = CASE WHEN due.paced_until IS NULL THEN o.update_id ELSE o.aps_timestamp_update_id END,
            channel_id = due.channel_id, updated_at = now()
        FROM due WHERE o.id = due.id AND o.id = ANY (ARRAY(SELECT id FROM due))
        RETURNING o.id, o.claim_token, o.next_attempt_at, due.previous_holder
        """
    }

    /// The claim's second statement: the claimed rows with their update and pending updates.
    static func claimedRowsStatement(ids: [String], tokens: [String]) -> PostgresQuery {
        """
        SELECT o.id AS outbox_id, o.claim_token, o.claimed_until, o.attempts, o.event_id, e.app_id, e.attribute_type_id,
               c.id AS channel_id, c.apns_channel_id, c.storage_policy, c.state AS channel_state,
               CASE WHEN o.aps_timestamp_update_id = o.update_id THEN o.aps_timestamp END AS fixed_aps_timestamp,
               greatest(c.last_aps_timestamp, CASE WHEN o.aps_timestamp_update_id IS DISTINCT FROM o.update_id
                                                   THEN o.aps_timestamp END, tr.aps_timestamp) AS last_aps_timestamp,
               c.last_broadcast_at, c.last_alert_at, \(FreshnessSQL.columns), p.id IS NULL OR p.newest AS carries_update,
               u.id AS update_id, u.action, CASE WHEN p.id IS NULL OR p.newest THEN u.content_state END AS content_state,
               CASE WHEN p.id IS NULL OR p.newest THEN u.alert END AS alert, u.stale_date, u.dismissal_date,
               u.relevance_score, u.priority, u.occurred_at, u.received_at,
               p.id AS pending_id, p.priority AS pending_priority, p.alert AS pending_alert, p.occurred_at AS pending_occurred_at
        FROM outbox o
        JOIN events e ON e.id = o.event_id
        \(FreshnessSQL.typePolicyJoin)
        JOIN channels c ON c.id = o.channel_id
        LEFT JOIN token_routes tr ON tr.event_id = o.event_id
        JOIN updates u ON u.id = o.update_id
        LEFT JOIN LATERAL (
            SELECT id, priority, alert, occurred_at, id = max(id) OVER () AS newest FROM updates
            WHERE event_id = o.event_id AND disposition = \(UpdateDisposition.pending.sql) AND id <= o.update_id
        ) p ON true
        WHERE o.id = ANY (\(ids)::bigint[]) AND o.claim_token = ANY (\(tokens)::uuid[])
        ORDER BY o.next_attempt_at, o.id, p.id
        """
    }

    private static let eventStatusAfterEnd = EventLifecycle.sqlStatus(after: .endBroadcast, column: "e.status")
    /// Bound, not spliced, and tested with `<@` rather than `= ANY`: the event rows come by their ids. A
    /// spliced list would let the plan prove `events_ending` and read every ending event instead of the
    /// primary key; so would a bound one with `= ANY` in a custom plan, which made the custom plans look
    /// cheaper than the generic one and PostgreSQL plan the record anew on every call (see
    /// `recordRowsEstimate`). Containment proves no partial index, so both plans read the primary key.
    private static let eventStatesTakingTheEnd = EventLifecycle.states(accepting: .endBroadcast).map(\.rawValue)

    /// The fewest records the record statement's plan assumes: its LIMIT is `greatest(count, this)`.
    /// PostgreSQL keeps a statement's generic plan only while it costs no more than the custom plans made for
    /// the parameters of each call (plus their planning). A custom plan saw a LIMIT of the bare count (a
    /// batch is usually a few records) where the generic plan guesses a tenth of jsonb_to_recordset's 100
    /// rows, and so looked cheaper, and the record was planned anew on every call (Scripts/bench service at
    /// 500 updates/s, pg_stat_statements: 5.3 to 7.9 s of planning in a minute, 0.7 to 1.0 ms a call). With
    /// this floor a custom plan for up to 10 records sees the generic plan's 10 rows.
    static let recordRowsEstimate = 10

    /// The statement of `recordBroadcasts`, for `count` records as one jsonb array. Its channels come by their
    /// primary key through `c.id = ANY (ARRAY(...))`, and its events only when a record ends one (the `EXISTS`,
    /// a one-time filter): joined to the input rows alone, the generic plan hashed the input and read every
    /// channel (on a thousand channels, each updated every second, that looked cheaper than ten index probes),
    /// and a plan made on a new database (serve's warm-up) read every live event on every call.
    static func recordStatement(input: JSONValue, count: Int, now: Date?) -> PostgresQuery {
        """
        WITH input AS (
            SELECT * FROM jsonb_to_recordset(\(input.postgresJSON)::jsonb) AS i(
                n integer, outbox_id bigint, claim_token uuid, channel_id bigint, event_id bigint, update_id bigint,
                aps_timestamp bigint, sent_at float8, ends boolean, delay float8, app_id bigint, apns_request_id uuid,
                apns_unique_id uuid, status integer, reason text, latency_us bigint, priority smallint, attempt integer,
                alert_update_id bigint)
            LIMIT greatest(\(count), \(recordRowsEstimate))
        ), stamped AS (
            UPDATE channels c SET last_aps_timestamp = i.aps_timestamp,
                last_broadcast_at = coalesce(to_timestamp(i.sent_at), \(now), now()),
                last_alert_at = CASE WHEN i.alert_update_id IS NOT NULL THEN coalesce(to_timestamp(i.sent_at), \(now), now()) ELSE c.last_alert_at END,
                state = CASE WHEN i.ends AND c.state IN \(ChannelLifecycle.broadcastingStates.sql) THEN \(fragment: Self.endedState) ELSE c.state END,
                attempts = CASE WHEN i.ends AND c.state IN \(ChannelLifecycle.broadcastingStates.sql) THEN 0 ELSE c.attempts END,
                next_attempt_at = CASE WHEN i.ends AND c.state IN \(ChannelLifecycle.broadcastingStates.sql) THEN NULL ELSE c.next_attempt_at END,
                ended_at = CASE WHEN i.ends AND c.state IN \(ChannelLifecycle.broadcastingStates.sql) THEN coalesce(\(now), now()) ELSE c.ended_at END,
                updated_at = now()
            FROM input i
            WHERE c.id = ANY (ARRAY(SELECT channel_id FROM input)) AND c.id = i.channel_id
              AND (c.last_aps_timestamp IS NULL OR c.last_aps_timestamp < i.aps_timestamp)
            RETURNING i.*
        ), disposed AS (
            UPDATE updates u SET disposition = CASE WHEN u.id = s.update_id THEN \(UpdateDisposition.broadcast.sql) ELSE \(UpdateDisposition.conflated.sql) END,
                                 disposed_at = now()
            FROM stamped s
            WHERE u.event_id = s.event_id AND u.disposition = \(UpdateDisposition.pending.sql) AND u.id <= s.update_id
            RETURNING u.id
        ), delivered AS (
            INSERT INTO deliveries (app_id, kind, channel_id, update_id, apns_request_id, apns_unique_id, status, reason,
                                    latency_us, priority, attempt, aps_timestamp, alert_update_id)
            SELECT app_id, 'broadcast', channel_id, update_id, apns_request_id, apns_unique_id, status, reason,
                   latency_us, priority, attempt, aps_timestamp, alert_update_id
            FROM stamped ORDER BY n
            RETURNING id
        ), event_ended AS (
            UPDATE events e SET status = \(fragment: eventStatusAfterEnd), updated_at = now()
            FROM stamped s
            WHERE EXISTS (SELECT FROM stamped WHERE ends) AND e.id = s.event_id AND s.ends
              AND ARRAY[e.status::text] <@ \(eventStatesTakingTheEnd)::text[]
            RETURNING e.id
        ), deleted AS (
            DELETE FROM outbox o USING stamped s
            WHERE o.id = s.outbox_id AND o.claim_token = s.claim_token AND o.update_id = s.update_id
            RETURNING s.n
        ), released AS (
            UPDATE outbox o SET claimed_by = NULL, claim_token = NULL, claimed_until = NULL, attempts = 0,
                next_attempt_at = CASE WHEN o.next_attempt_at <= \(IngestRepository.urgentDue) THEN o.next_attempt_at
                                       ELSE coalesce(\(now), now()) + make_interval(secs => s.delay) END,
                updated_at = now()
            FROM stamped s
            WHERE o.id = s.outbox_id AND o.claim_token = s.claim_token AND o.update_id <> s.update_id
            RETURNING s.n
        )
        SELECT (SELECT coalesce(string_agg(n::text, ','), '') FROM stamped) AS stamped,
               (SELECT count(*) FROM disposed) AS disposed, (SELECT count(*) FROM delivered) AS delivered,
               (SELECT count(*) FROM event_ended) AS ended,
               (SELECT coalesce(string_agg(n::text, ','), '') FROM deleted) AS deleted,
               (SELECT coalesce(string_agg(n::text, ','), '') FROM released) AS released
        """
    }

    private static func filled(_ delivery: DeliveryDraft, _ claim: ClaimedBroadcast) -> DeliveryDraft {
        var filled = delivery
        if filled.channelID == nil { filled.channelID = claim.channelID }
        if filled.updateID == nil { filled.updateID = claim.update.id }
        return filled
    }
}
