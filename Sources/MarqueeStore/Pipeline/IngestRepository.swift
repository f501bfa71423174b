// The hot path of `POST /v1/events/{id}/updates`: the reply is 202 only once this transaction
// commits. Four statements (two without an idempotency key), in a fixed order so concurrent ingests
// cannot deadlock: the idempotency row first, then the event row (FOR UPDATE), then one statement
// for the update, the event's latest state and its outbox row, then the stored answer. There is no
// NOTIFY in here: one inside the transaction would hold PostgreSQL's cluster-wide notify lock through
// the commit's WAL flush and serialize every ingest commit; the caller wakes dispatchers after the
// commit (MarqueeService's OutboxNotifier).
//
// Choices:
// * An in-flight duplicate (same API key and idempotency key while the first request's transaction
//   is open) WAITS: its INSERT into idempotency_keys blocks on the first one's uncommitted row. When
//   the first commits, the duplicate gets its stored answer (or `idempotencyKeyReused`); when it
//   rolls back, the duplicate runs as if it were first. No "try again later" error is needed.
// * Older pending updates of the event stay 'pending' here; the dispatcher marks them 'conflated'
//   when it records the broadcast of a newer one (`OutboxRepository.recordBroadcast`), so
//   'conflated' always means "a newer state actually went". An update older than the latest state
//   is 'superseded' at once and touches neither the latest state nor the outbox.
// * An `end` is never superseded (the final state must go out); it moves the event to 'ending'.
//   After that only another `end` is accepted, and nothing once the event is ended or cancelled
//   (`eventClosed`), so every accepted update can still reach a channel.
// * The merge of a JSON merge patch happens under the event's row lock: `contentState` receives the
//   locked latest state and returns the full new state (validated by the caller's schema code);
//   the update row stores that full state, so every update can be broadcast on its own.
// * An end's `at` (`UpdateDraft.notBefore`) is kept on the update and on the outbox row, which the next
//   update replaces with its own; dispatchers do not claim a row before it (Sql/0004).
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

    public init(action: UpdateAction = .update, alert: JSONValue? = nil, staleDate: Date? = nil,
                dismissalDate: Date? = nil, relevanceScore: Double? = nil, priority: RequestedPriority = .auto,
                occurredAt: Date?, apiKeyID: Int? = nil, urgent: Bool = false, notBefore: Date? = nil) {
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
    /// 32 bytes.
    public var requestHash: Data

    public init(apiKeyID: Int, key: String, requestHash: Data) {
        self.apiKeyID = apiKeyID
        self.key = key
        self.requestHash = requestHash
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

/// The event as locked for an ingest: what a merge patch applies to.
public struct LockedEvent: Sendable, Equatable {
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

/// Ingests updates: one transaction per update, under a lock on the event.
public struct IngestRepository: Sendable {
    /// How long an idempotency key is remembered.
    public static let idempotencyWindow: TimeInterval = 24 * 3600
    /// When an urgent update (an alert, `high`) makes its outbox row due: at the epoch, so claims, which
    /// take rows by `next_attempt_at`, take it before a backlog of ordinary rows.
    static let urgentDue = Date(timeIntervalSince1970: 0)
    /// The NOTIFY channel dispatchers listen on (a wake-up; the payload means nothing).
    public static let notifyChannel = "marquee_outbox"

    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Stores one update. `contentState` gets the locked event and returns the full new state (apply a
    /// merge patch there; throw to refuse, which stores nothing). `response` builds the answer stored
    /// for idempotent replays. `now` overrides the database clock for idempotency expiry (tests).
    /// Throws `eventNotFound`, `eventClosed`, `idempotencyKeyReused`, or what the closures throw.
    public func ingest(
        eventID: Int,
        _ draft: UpdateDraft,
        idempotency: IdempotencyRequest? = nil,
        now: Date? = nil,
        contentState: (LockedEvent) throws -> JSONValue,
        response: (IngestedUpdate) throws -> StoredResponse
    ) async throws -> IngestResult {
        try await pool.withTransaction { tx in
            if let idempotency, let stored = try await claimKey(idempotency, now: now, on: tx) {
                return .replayed(stored)
            }
            let locked = try await lockEvent(eventID, on: tx)
            switch (locked.status, draft.action) {
            case (.scheduled, _), (.live, _), (.ending, .end): break
            case (.ending, .update), (.ended, _), (.cancelled, _): throw PipelineError.eventClosed(eventID, locked.status)
            }
            let state = try contentState(locked)
            // One statement: the update, and unless it is superseded, the latest state and the outbox row
            // pointing at it.
            let row = try await tx.query("""
                WITH stored AS (
                    INSERT INTO updates (event_id, api_key_id, action, content_state, alert, stale_date, dismissal_date,
                                         relevance_score, priority, occurred_at, not_before, disposition, disposed_at)
                    SELECT \(eventID), \(draft.apiKeyID), \(draft.action), \(state.postgresJSON), \(draft.alert?.postgresJSON),
                           \(draft.staleDate), \(draft.dismissalDate), \(draft.relevanceScore), \(draft.priority.rawValue),
                           s.occurred_at, \(draft.notBefore), s.disposition, CASE WHEN s.disposition = 'superseded' THEN now() END
                    FROM (SELECT t.occurred_at, CASE WHEN \(draft.action) = 'update' AND t.occurred_at < t.latest_state_at
                                                     THEN 'superseded' ELSE 'pending' END AS disposition
                          FROM (SELECT coalesce(\(draft.occurredAt), greatest(now(), latest_state_at)) AS occurred_at, latest_state_at
                                FROM events WHERE id = \(eventID)) t) s
                    RETURNING id, content_state, disposition, occurred_at, received_at
                ), latest AS (
                    UPDATE events SET latest_state = stored.content_state,
                                      latest_state_at = greatest(events.latest_state_at, stored.occurred_at),
                                      latest_update_id = stored.id, updated_at = now(),
                                      status = CASE WHEN \(draft.action) = 'end' THEN 'ending' ELSE events.status END
                    FROM stored WHERE events.id = \(eventID) AND stored.disposition = 'pending'
                ), queued AS (
                    INSERT INTO outbox (event_id, update_id, not_before, next_attempt_at)
                    SELECT \(eventID), id, \(draft.notBefore), CASE WHEN \(draft.urgent) THEN \(Self.urgentDue) ELSE now() END
                    FROM stored WHERE disposition = 'pending'
                    ON CONFLICT (event_id) DO UPDATE SET
                        update_id = EXCLUDED.update_id, not_before = EXCLUDED.not_before, updated_at = now(),
                        next_attempt_at = CASE WHEN \(draft.urgent) THEN \(Self.urgentDue)
                                               ELSE outbox.next_attempt_at END
                )
                SELECT id, disposition, occurred_at, received_at FROM stored
                """)[0]
            let update = IngestedUpdate(id: try row.decode(Int.self, column: "id"), eventID: eventID,
                                        disposition: try row.decode(UpdateDisposition.self, column: "disposition"),
                                        contentState: state, occurredAt: try row.decode(Date.self, column: "occurred_at"),
                                        receivedAt: try row.decode(Date.self, column: "received_at"))
            let answer = try response(update)
            if let idempotency {
                try await tx.query("""
                    UPDATE idempotency_keys SET response_status = \(answer.status), response_body = \(answer.body)
                    WHERE api_key_id = \(idempotency.apiKeyID) AND key = \(idempotency.key)
                    """)
            }
            return .accepted(update, answer)
        }
    }

    /// Deletes expired idempotency keys; returns how many went.
    @discardableResult
    public func purgeExpiredIdempotencyKeys(now: Date? = nil) async throws -> Int {
        try await pool.execute("DELETE FROM idempotency_keys WHERE expires_at <= coalesce(\(now), now())")
    }

    /// Takes the key for this request, or returns the stored answer of an earlier one. An expired key
    /// is taken over. Waits while another transaction holds the same key (see the file comment).
    private func claimKey(_ request: IdempotencyRequest, now: Date?, on tx: PostgresConnection) async throws -> StoredResponse? {
        let taken = try await tx.query("""
            INSERT INTO idempotency_keys (api_key_id, key, request_hash, created_at, expires_at)
            VALUES (\(request.apiKeyID), \(request.key), \(request.requestHash), coalesce(\(now), now()),
                    coalesce(\(now), now()) + make_interval(secs => \(Self.idempotencyWindow)))
            ON CONFLICT (api_key_id, key) DO UPDATE SET
                request_hash = EXCLUDED.request_hash, created_at = EXCLUDED.created_at,
                expires_at = EXCLUDED.expires_at, response_status = NULL, response_body = NULL
            WHERE idempotency_keys.expires_at <= EXCLUDED.created_at
            RETURNING 1 AS taken
            """)
        if !taken.isEmpty { return nil }
        let row = try await tx.query("""
            SELECT request_hash, response_status, response_body FROM idempotency_keys
            WHERE api_key_id = \(request.apiKeyID) AND key = \(request.key)
            """)[0]
        guard try row.decode(Data.self, column: "request_hash") == request.requestHash,
              let status = try row.decode(Int?.self, column: "response_status"),
              let body = try row.decode(Data?.self, column: "response_body")
        else { throw PipelineError.idempotencyKeyReused(key: request.key) }
        return StoredResponse(status: status, body: body)
    }

    private func lockEvent(_ eventID: Int, on tx: PostgresConnection) async throws -> LockedEvent {
        let rows = try await tx.query("""
            SELECT id, app_id, attribute_type_id, status, channel_lost, latest_state, latest_state_at, latest_update_id
            FROM events WHERE id = \(eventID) FOR UPDATE
            """)
        guard let row = rows.first else { throw PipelineError.eventNotFound(eventID) }
        return LockedEvent(id: eventID, appID: try row.decode(Int.self, column: "app_id"),
                           attributeTypeID: try row.decode(Int.self, column: "attribute_type_id"),
                           status: try row.decode(EventStatus.self, column: "status"),
                           channelLost: try row.decode(Bool.self, column: "channel_lost"),
                           latestState: try row.decodeJSON(column: "latest_state"),
                           latestStateAt: try row.decode(Date?.self, column: "latest_state_at"),
                           latestUpdateID: try row.decode(Int?.self, column: "latest_update_id"))
    }
}
