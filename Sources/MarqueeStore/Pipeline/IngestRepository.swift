// The hot path of `POST /v1/events/{id}/updates`: the reply is 202 only once the update is durable.
// One round trip: one statement, which PostgreSQL runs as one implicit transaction. The event row is
// updated first (its row lock orders concurrent ingests, and READ COMMITTED re-checks its WHERE and
// recomputes its SET on the newest row version after a wait), then the update row, the outbox row and
// the idempotency key, written once and pointing at the update. There is no NOTIFY in here: one inside
// the transaction would hold PostgreSQL's cluster-wide notify lock through the commit's WAL flush and
// serialize every ingest commit; the caller wakes dispatchers after the commit (OutboxNotifier).
//
// Choices:
// * Update ids are taken under the event's row lock (nextval in the event's UPDATE), so per event they
//   follow the order of arrival: the dispatcher conflates "every pending update up to the outbox one".
// * A whole content-state needs nothing from the event, so it is written at once. A state derived from
//   the latest one (a JSON merge patch, an end that keeps the state) is computed from a snapshot of the
//   event and written only if the event's latest update is still the snapshot's (compare and swap under
//   the row lock); otherwise it is computed again. So a patch always applies to the state it replaces.
// * A key already stored (per API key) fails the write on its primary key, so nothing of the request
//   stays; the answer is then rebuilt from the update the key points at (or `idempotencyKeyReused`), or,
//   for an expired key, the key is dropped and the write runs again. An in-flight duplicate WAITS: for the
//   event's row lock, or for the first request's uncommitted key; when the first commits, the duplicate's
//   write fails on the key and it gets the first one's answer; when it rolls back, the duplicate runs as
//   if it were first. A refused request (event not found or closed) writes no key.
// * Older pending updates of the event stay 'pending' here; the dispatcher marks them 'conflated'
//   when it records the broadcast of a newer one (`OutboxRepository.recordBroadcast`), so
//   'conflated' always means "a newer state actually went". An update older than the latest state
//   is 'superseded' at once and touches neither the latest state nor the outbox.
// * An `end` is never superseded (the final state must go out); it moves the event to 'ending'.
//   After that only another `end` is accepted, and nothing once the event is ended or cancelled
//   (`eventClosed`), so every accepted update can still reach a channel.
// * An end's `at` (`UpdateDraft.notBefore`) is kept on the update and on the outbox row, which the next
//   update replaces with its own; dispatchers do not claim a row before it (Sql/0004).
// * With `pacing` (the dispatcher's one broadcast per channel per interval), a new outbox row of an update
//   that is not urgent is due when the pacing allows (the channel's last broadcast plus the interval), not
//   now: a claim then takes it once, when it may go, instead of first setting it aside (a second write of
//   the row, its index entries moved) and claiming it later. The answer says when it is due, so this
//   process's dispatcher wakes for it without being told to claim at once.
import Foundation
import MarqueeCore
import Postgres

/// An update to ingest, apart from its content-state (which `IngestRepository.ingest` asks for under the lock).
public struct UpdateDraft: Sendable, Equatable {
    public var action: UpdateAction
    public var alert: JSONValue?
    public var staleDate: Date?
    public var dismissalDate: Date?
    public var relevanceScore: Double?
    public var priority: RequestedPriority
    /// When the state held at the source; nil: now, but never before the event's latest state (the
    /// order of arrival under the event lock, so concurrent updates without a time are never superseded).
    public var occurredAt: Date?
    /// The API key that sent it (nil for operator tools without one).
    public var apiKeyID: Int?
    /// Make the event's outbox row due now even if it waits (a `high` update or an alert may go at once).
    public var urgent: Bool
    /// Not broadcast before this instant (`at` of an end); nil: as soon as the dispatcher may.
    public var notBefore: Date?
    /// An end that replaces the end an ending event took already (its state, dismissal date and `at`); without
    /// it a second end is refused (`endAlreadyAccepted`).
    public var replacesEnd: Bool

    /// An end that cancels the event (`POST /v1/events/{id}/cancel`): the status becomes `cancelled` with the end
    /// queued, and the end broadcast still goes out (its record leaves a cancelled event cancelled).
    public var cancels = false

    /// What accepting it means to the event's lifecycle.
    public var lifecycleEvent: EventLifecycle.Event {
        switch action {
        case .update: .updateAccepted
        case .end: cancels ? .cancelRequested : replacesEnd ? .endReplaced : .endAccepted
        }
    }

    public init(
        action: UpdateAction = .update, alert: JSONValue? = nil, staleDate: Date? = nil,
        dismissalDate: Date? = nil, relevanceScore: Double? = nil, priority: RequestedPriority = .auto,
        occurredAt: Date?, apiKeyID: Int? = nil, urgent: Bool = false, notBefore: Date? = nil, replacesEnd: Bool = false
    ) {
        self.replacesEnd = replacesEnd
        self.action = action
        self.alert = alert
        self.staleDate = staleDate
        self.dismissalDate = dismissalDate
        self.relevanceScore = relevanceScore
        self.priority = priority
        self.occurredAt = occurredAt
        self.apiKeyID = apiKeyID
        self.urgent = urgent
        self.notBefore = notBefore
    }
}

/// The `Idempotency-Key` of a request: per API key, with the SHA-256 of the request (method, path, body).
public struct IdempotencyRequest: Sendable, Equatable {
    public var apiKeyID: Int
    public var key: String
    /// 32 bytes, stored with the key.
    public var requestHash: Data
    /// Other hashes that name the same request, for keys stored by an earlier version that hashed it
    /// otherwise (at most 24 h old; see `EventRoutes.idempotency`).
    public var earlierHashes: [Data]

    public init(apiKeyID: Int, key: String, requestHash: Data, earlierHashes: [Data] = []) {
        self.apiKeyID = apiKeyID
        self.key = key
        self.requestHash = requestHash
        self.earlierHashes = earlierHashes
    }
}

/// An HTTP answer kept for idempotent replays.
public struct StoredResponse: Sendable, Hashable {
    public var status: Int
    public var body: Data

    public init(status: Int, body: Data) {
        self.status = status
        self.body = body
    }
}

/// The event as read for an ingest whose state derives from the latest one (what a merge patch applies to).
public struct EventSnapshot: Sendable, Equatable {
    public var id: Int
    public var appID: Int
    public var attributeTypeID: Int
    public var status: EventStatus
    public var channelLost: Bool
    public var latestState: JSONValue?
    public var latestStateAt: Date?
    public var latestUpdateID: Int?
}

/// An update as stored by an ingest.
public struct IngestedUpdate: Sendable, Equatable {
    public var id: Int
    public var eventID: Int
    public var disposition: UpdateDisposition
    public var contentState: JSONValue
    public var occurredAt: Date
    public var receivedAt: Date
    /// Seconds from the ingest until the event's outbox row is due (0 or less: now); nil when nothing was
    /// queued (superseded) or not known (a replay). Relative, so it holds whatever the clocks of the
    /// database and this process say.
    public var dueIn: TimeInterval? = nil
}

/// The result of an ingest: stored now, or the answer stored by an earlier request with the same key.
public enum IngestResult: Sendable, Equatable {
    case accepted(IngestedUpdate, StoredResponse)
    case replayed(StoredResponse)

    /// The answer to send either way.
    public var response: StoredResponse {
        switch self {
        case .accepted(_, let response), .replayed(let response): response
        }
    }
}

/// Ingests updates: one round trip per update (two when the state derives from the latest one).
public struct IngestRepository: Sendable {
    /// How long an idempotency key is remembered.
    public static let idempotencyWindow: TimeInterval = 24 * 3600
    /// When an urgent update (an alert, `high`) makes its outbox row due: at the epoch, so claims, which
    /// take rows by `next_attempt_at`, take it before a backlog of ordinary rows.
    static let urgentDue = Date(timeIntervalSince1970: 0)
    /// The NOTIFY channel dispatchers listen on (a wake-up; the payload means nothing).
    public static let notifyChannel = "marquee_outbox"
    /// Writes of a derived state that may lose the compare-and-swap to concurrent updates before giving up.
    static let maxAttempts = 16
    /// The constraint a second write of an idempotency key fails on (SQLSTATE 23505).
    static let keyConstraint = "idempotency_keys_pkey"

    let pool: PostgresPool
    /// The dispatcher's pacing interval (seconds), so a queued update is due when its channel may broadcast
    /// again; nil: due at once.
    let pacing: TimeInterval?

    public init(pool: PostgresPool, pacing: TimeInterval? = nil) {
        self.pool = pool
        self.pacing = pacing
    }

    /// Stores one update with its whole content-state (validated by the caller). `appID` (an API key bound
    /// to an app) makes events of other apps not found. `response` builds the answer from the stored
    /// update, for this request and for its idempotent replays. `now` overrides the database clock for
    /// idempotency expiry (tests). Throws `eventNotFound`, `eventClosed`, `idempotencyKeyReused`.
    public func ingest(
        eventID: Int,
        _ draft: UpdateDraft,
        state: JSONValue,
        appID: Int? = nil,
        idempotency: IdempotencyRequest? = nil,
        now: Date? = nil,
        response: (IngestedUpdate) -> StoredResponse
    ) async throws -> IngestResult {
        try await ingest(
            eventID: eventID, draft, appID: appID, idempotency: idempotency, now: now,
            contentState: { _ in state }, whole: state, response: response)
    }

    /// Stores one update whose content-state derives from the event's latest one: `contentState` gets a
    /// snapshot of the event and returns the full new state (apply a merge patch there; throw to refuse,
    /// which stores nothing). It runs again when another update got in first. Otherwise as above.
    public func ingest(
        eventID: Int,
        _ draft: UpdateDraft,
        appID: Int? = nil,
        idempotency: IdempotencyRequest? = nil,
        now: Date? = nil,
        contentState: (EventSnapshot) throws -> JSONValue,
        response: (IngestedUpdate) -> StoredResponse
    ) async throws -> IngestResult {
        try await ingest(
            eventID: eventID, draft, appID: appID, idempotency: idempotency, now: now,
            contentState: contentState, whole: nil, response: response)
    }

    private func ingest(
        eventID: Int, _ draft: UpdateDraft, appID: Int?, idempotency: IdempotencyRequest?, now: Date?,
        contentState: (EventSnapshot) throws -> JSONValue, whole: JSONValue?,
        response: (IngestedUpdate) -> StoredResponse
    ) async throws -> IngestResult {
        for attempt in 1...Self.maxAttempts {
            // A whole state is written blind the first time; a refusal, or a derived state, needs the event.
            let state: JSONValue
            var expectedUpdateID: Int??
            if let whole, attempt == 1 {
                state = whole
            } else {
                let snapshot: EventSnapshot
                do {
                    snapshot = try await self.snapshot(eventID: eventID, appID: appID, draft: draft)
                } catch let refusal as PipelineError {
                    // A retry of a request that was accepted gets its answer, even once the event has closed.
                    if let idempotency, let answer = try await storedAnswer(idempotency, eventID: eventID, now: now, response: response) {
                        return .replayed(answer)
                    }
                    throw refusal
                }
                if let whole {
                    state = whole
                } else {
                    state = try contentState(snapshot)
                    expectedUpdateID = .some(snapshot.latestUpdateID)
                }
            }
            let rows: PostgresRows
            do {
                rows = try await pool.query(
                    Self.write(
                        eventID: eventID, draft, state: state, appID: appID,
                        expectedUpdateID: expectedUpdateID, idempotency: idempotency, now: now,
                        pacing: pacing))
            } catch let error as PostgresError where error.constraint == Self.keyConstraint {
                // The key is another request's (or this one's, accepted before): answer as it was answered.
                // An expired key is gone now, so the next write takes it.
                if let idempotency, let answer = try await storedAnswer(idempotency, eventID: eventID, now: now, response: response) {
                    return .replayed(answer)
                }
                continue
            }
            if let row = rows.first {
                let update = IngestedUpdate(
                    id: try row.decode(Int.self, column: "id"), eventID: eventID,
                    disposition: try row.decode(UpdateDisposition.self, column: "disposition"),
                    contentState: state, occurredAt: try row.decode(Date.self, column: "occurred_at"),
                    receivedAt: try row.decode(Date.self, column: "received_at"),
                    dueIn: try row.decode(Double?.self, column: "due_in"))
                return .accepted(update, response(update))
            }
            // Nothing written: the event is gone or closed (the snapshot says so next time round), or
            // another update got in between the snapshot and the write.
        }
        throw PipelineError.eventBusy(eventID)
    }

    /// Runs the ingest's write once on `connection` for no event (id 0, which identities never give), with an
    /// idempotency key; it writes nothing, as for an event that is gone. PostgreSQL parses and plans a statement the first time
    /// each backend runs it (about 4 ms for the write on this project's bench machine, then 0.2 ms), and a
    /// fresh pool would otherwise pay for that in its first requests. `pacing` as the repository's.
    static func warmUp(on connection: PostgresConnection, pacing: TimeInterval?) async throws {
        let key = IdempotencyRequest(apiKeyID: 0, key: "marquee-warm-up", requestHash: Data(count: 32))
        _ = try await connection.query(
            write(
                eventID: 0, UpdateDraft(occurredAt: Date(), apiKeyID: 0), state: [:], appID: nil,
                expectedUpdateID: nil, idempotency: key, now: nil, pacing: pacing))
    }

    /// Deletes expired idempotency keys; returns how many went.
    @discardableResult
    public func purgeExpiredIdempotencyKeys(now: Date? = nil) async throws -> Int {
        try await pool.execute("DELETE FROM idempotency_keys WHERE expires_at <= coalesce(\(now), now())")
    }

    /// The event for a derived state or a refusal; throws what the write's refusal means.
    private func snapshot(eventID: Int, appID: Int?, draft: UpdateDraft) async throws -> EventSnapshot {
        let rows = try await pool.query(
            """
            SELECT app_id, attribute_type_id, status, channel_lost, latest_state, latest_state_at, latest_update_id
            FROM events WHERE id = \(eventID)
            """)
        guard let row = rows.first else { throw PipelineError.eventNotFound(eventID) }
        let snapshot = EventSnapshot(
            id: eventID, appID: try row.decode(Int.self, column: "app_id"),
            attributeTypeID: try row.decode(Int.self, column: "attribute_type_id"),
            status: try row.decode(EventStatus.self, column: "status"),
            channelLost: try row.decode(Bool.self, column: "channel_lost"),
            latestState: try row.decodeJSON(column: "latest_state"),
            latestStateAt: try row.decode(Date?.self, column: "latest_state_at"),
            latestUpdateID: try row.decode(Int?.self, column: "latest_update_id"))
        if let appID, appID != snapshot.appID { throw PipelineError.eventNotFound(eventID) }
        guard EventLifecycle.transition(from: snapshot.status, on: draft.lifecycleEvent) != nil else {
            if snapshot.status == .ending && draft.action == .end { throw PipelineError.endAlreadyAccepted(eventID) }
            throw PipelineError.eventClosed(eventID, snapshot.status)
        }
        return snapshot
    }

    /// Superseded: an update stamped before the event's latest state. The same test holds on the row
    /// before the write (in SET) and after it (in RETURNING), because the write leaves latest_state_at
    /// alone for a superseded update and sets it to occurred_at otherwise.
    private static let superseded: PostgresQuery = "(i.action = \(UpdateAction.update.sql) AND i.occurred_at < e.latest_state_at) IS TRUE"

    /// For each kind of update, the statuses that accept it and the status it leaves, as the lifecycle says.
    /// The statuses are bound as a parameter, unlike the lists of the sweep's reads: the event row is found by
    /// its id (`write` names the key itself) and needs no partial index.
    private static let acceptance: [EventLifecycle.Event: (states: [String], status: PostgresQuery)] =
        Dictionary(
            uniqueKeysWithValues: [EventLifecycle.Event.updateAccepted, .endAccepted, .endReplaced, .cancelRequested].map { event in
                (event, (EventLifecycle.states(accepting: event).map(\.rawValue), EventLifecycle.sqlStatus(after: event, column: "e.status")))
            })

    /// The write: the event row (only if open for this action, in the caller's app and still at the expected
    /// latest update), then the update and the outbox row (`OutboxWriter.enqueue`: a new one due when `pacing`
    /// allows after the channel's last broadcast) and the idempotency key pointing at the update; nothing when the
    /// event refused. A key already there fails the statement on `keyConstraint`. Returns the update and in how many seconds its
    /// outbox row is due, or no row.
    static func write(
        eventID: Int, _ draft: UpdateDraft, state: JSONValue, appID: Int?, expectedUpdateID: Int??,
        idempotency: IdempotencyRequest?, now: Date?, pacing: TimeInterval?
    ) -> PostgresQuery {
        """
        WITH input AS (
            SELECT \(eventID)::bigint AS event_id, \(draft.action)::text AS action, \(draft.occurredAt)::timestamptz AS occurred_at
        ), latest AS (
            UPDATE events e SET
                latest_state = CASE WHEN \(fragment: superseded) THEN e.latest_state ELSE \(state.postgresJSON) END,
                latest_state_at = CASE WHEN \(fragment: superseded) THEN e.latest_state_at
                                       ELSE greatest(e.latest_state_at, coalesce(i.occurred_at, now())) END,
                latest_update_id = CASE WHEN \(fragment: superseded) THEN e.latest_update_id
                                        ELSE nextval('updates_id_seq') END,
                status = \(fragment: acceptance[draft.lifecycleEvent]!.status),
                updated_at = now()
            FROM input i
            -- The key itself, not the input row's copy of it: matched through the input row, a generic plan made
            -- while the table was empty and never analyzed (serve's warm-up on a new database) reads every event.
            WHERE e.id = \(eventID)
              AND e.status = ANY (\(acceptance[draft.lifecycleEvent]!.states)::text[])
              AND (\(appID)::bigint IS NULL OR e.app_id = \(appID))
              AND (NOT \(expectedUpdateID != nil) OR e.latest_update_id IS NOT DISTINCT FROM \(expectedUpdateID ?? nil)::bigint)
            RETURNING e.latest_update_id, e.latest_state_at, \(fragment: superseded) AS superseded
        ), \(fragment: OutboxWriter.enqueue(eventID: eventID, draft, state: state, pacing: pacing)), keyed AS (
            INSERT INTO idempotency_keys (api_key_id, key, request_hash, update_id, created_at, expires_at)
            SELECT \(idempotency?.apiKeyID), \(idempotency?.key), \(idempotency?.requestHash), id, coalesce(\(now), now()),
                   coalesce(\(now), now()) + make_interval(secs => \(idempotencyWindow))
            FROM stored WHERE \(idempotency != nil)
        )
        SELECT id, disposition, occurred_at, received_at, extract(epoch FROM (SELECT next_attempt_at FROM queued) - now())::float8 AS due_in
        FROM stored
        """
    }

    /// The answer to a replay, rebuilt from the update the key's first request stored (the disposition it had
    /// at ingest: superseded at once, or pending). Nil when there is none: no key, or an expired one, which
    /// goes here so that the next write takes the key. Throws `idempotencyKeyReused` for another request's
    /// key, `eventNotFound` when the stored update is gone with its event.
    private func storedAnswer(
        _ request: IdempotencyRequest, eventID: Int, now: Date?,
        response: (IngestedUpdate) -> StoredResponse
    ) async throws -> StoredResponse? {
        let rows = try await pool.query(
            """
            WITH expired AS (
                DELETE FROM idempotency_keys
                WHERE api_key_id = \(request.apiKeyID) AND key = \(request.key) AND expires_at <= coalesce(\(now), now())
                RETURNING 1
            )
            SELECT k.request_hash, u.id, u.event_id, u.content_state, u.disposition, u.occurred_at, u.received_at
            FROM idempotency_keys k LEFT JOIN updates u ON u.id = k.update_id
            WHERE k.api_key_id = \(request.apiKeyID) AND k.key = \(request.key) AND NOT EXISTS (SELECT 1 FROM expired)
            """)
        guard let row = rows.first else { return nil }
        let stored = try row.decode(Data.self, column: "request_hash")
        guard stored == request.requestHash || request.earlierHashes.contains(stored) else {
            throw PipelineError.idempotencyKeyReused(key: request.key)
        }
        guard let id = try row.decode(Int?.self, column: "id") else { throw PipelineError.eventNotFound(eventID) }
        let disposition = try row.decode(UpdateDisposition.self, column: "disposition")
        return response(
            IngestedUpdate(
                id: id, eventID: try row.decode(Int.self, column: "event_id"),
                disposition: disposition == .superseded ? .superseded : .pending,
                contentState: try row.decodeJSON(column: "content_state") ?? [:],
                occurredAt: try row.decode(Date.self, column: "occurred_at"),
                receivedAt: try row.decode(Date.self, column: "received_at")))
    }
}
