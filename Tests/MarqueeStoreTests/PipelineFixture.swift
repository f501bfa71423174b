import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres

/// A migrated fresh database with one app, one attribute type and one API key, inserted with plain SQL
/// (the app and key repositories are not the pipeline's), plus helpers to make events and open channels.
struct PipelineFixture {
    let configuration: PostgresConfiguration
    let pool: PostgresPool
    let appID: Int
    let typeID: Int
    let apiKeyID: Int

    var events: EventRepository { EventRepository(pool: pool) }
    var ingest: IngestRepository { IngestRepository(pool: pool) }
    var outbox: OutboxRepository { OutboxRepository(pool: pool) }
    var channels: ChannelRepository { ChannelRepository(pool: pool) }
    var deliveries: DeliveryRepository { DeliveryRepository(pool: pool) }

    static func make(maxConnections: Int = 4) async throws -> PipelineFixture {
        let configuration = try await TestDatabase.fresh()
        let pool = PostgresPool(configuration: configuration, maxConnections: maxConnections)
        try await MigrationRunner(pool: pool).migrate()
        let ids = try await pool.withTransaction { tx in
            let app = try await tx.query(
                """
                INSERT INTO apps (bundle_id, environment, team_id, key_id, key_path)
                VALUES ('com.example.scores', 'development', 'ABCDE12345', 'KEY1234567', 'keys/AuthKey.p8') RETURNING id
                """)[0].decode(Int.self, column: "id")
            let type = try await tx.query(
                """
                INSERT INTO attribute_types (app_id, name, attributes_schema, content_state_schema)
                VALUES (\(app), 'MatchAttributes', \(PostgresJSON("{}")), \(PostgresJSON("{}"))) RETURNING id
                """)[0].decode(Int.self, column: "id")
            let key = try await tx.query(
                """
                INSERT INTO api_keys (app_id, name, prefix, salt, hash, scopes)
                VALUES (\(app), 'feed', 'feed_key1', \(Data(repeating: 1, count: 16)), \(Data(repeating: 2, count: 32)),
                        \(["ingest"])) RETURNING id
                """)[0].decode(Int.self, column: "id")
            return [app, type, key]
        }
        return PipelineFixture(configuration: configuration, pool: pool, appID: ids[0], typeID: ids[1], apiKeyID: ids[2])
    }

    /// A second pool on the same database (a second Marquee instance).
    func secondPool() -> PostgresPool { PostgresPool(configuration: configuration, maxConnections: 2) }

    /// The rows of `table`.
    func count(_ table: String) async throws -> Int {
        try await pool.query("SELECT count(*)::bigint AS n FROM \(identifier: table)")[0].decode(Int.self, column: "n")
    }

    func makeEvent(
        _ externalID: String = "match-\(UUID().uuidString.prefix(8))", startsAt: Date = Date(),
        endsAt: Date? = nil, kind: EventKind = .match, topics: [String] = [],
        state: JSONValue? = ["home": 0, "away": 0]
    ) async throws -> EventRecord {
        try await events.create(
            NewEvent(
                appID: appID, externalID: externalID, kind: kind, attributeTypeID: typeID,
                startsAt: startsAt, endsAt: endsAt, topics: topics, initialState: state,
                initialStateAt: state == nil ? nil : Date(timeIntervalSince1970: 1_000_000)))
    }

    /// Drives the event's channel to 'open' as the scheduler would; returns it.
    func openChannel(eventID: Int, apnsID: String = "ch\(UUID().uuidString.prefix(8))=") async throws -> ChannelRecord {
        let planned = try await channels.createPlanned(eventID: eventID)
        var lifecycle = try require2(planned.lifecycle)
        let before = lifecycle
        _ = try lifecycle.leadTimeReached()
        guard try await channels.transition(channelID: planned.id, from: before, to: lifecycle) else { throw FixtureError.stale }
        let creating = lifecycle
        _ = try lifecycle.createSucceeded()
        guard
            try await channels.transition(
                channelID: planned.id, from: creating, to: lifecycle,
                apnsChannelID: apnsID.replacingOccurrences(of: "-", with: "A"), broadcasts: .resume)
        else { throw FixtureError.stale }
        return try await channels.get(id: planned.id)!
    }

    /// `count` events ("e0", "e1", ...), each with an open channel and one update at `occurredAt` queued; their ids.
    func eventsWithQueuedUpdates(_ count: Int, at occurredAt: Date) async throws -> [Int] {
        var events: [Int] = []
        for index in 0..<count {
            let event = try await makeEvent("e\(index)")
            _ = try await openChannel(eventID: event.id)
            try await post(event.id, ["home": 1], at: occurredAt)
            events.append(event.id)
        }
        return events
    }

    /// Ingests a whole-state update at `occurredAt`.
    @discardableResult
    func post(
        _ eventID: Int, _ state: JSONValue, at occurredAt: Date, priority: RequestedPriority = .auto,
        key: String? = nil, body: String = ""
    ) async throws -> IngestResult {
        let idempotency = key.map { IdempotencyRequest(apiKeyID: apiKeyID, key: $0, requestHash: Self.hash(body)) }
        return try await ingest.ingest(
            eventID: eventID, UpdateDraft(priority: priority, occurredAt: occurredAt, apiKeyID: apiKeyID),
            state: state, idempotency: idempotency, response: Self.answer)
    }

    /// `post` that must be accepted (not replayed); its stored update.
    func postAccepted(_ eventID: Int, _ state: JSONValue, at occurredAt: Date) async throws -> IngestedUpdate {
        guard case .accepted(let update, _) = try await post(eventID, state, at: occurredAt) else { throw FixtureError.notAccepted }
        return update
    }

    /// A stand-in answer made of everything a replay must rebuild exactly.
    static func answer(_ update: IngestedUpdate) -> StoredResponse {
        StoredResponse(
            status: 202,
            body: Data(
                """
                {"id":\(update.id),"event":\(update.eventID),"disposition":"\(update.disposition.rawValue)",\
                "occurredAt":\(update.occurredAt.timeIntervalSince1970),"receivedAt":\(update.receivedAt.timeIntervalSince1970)}
                """.utf8))
    }

    /// A stand-in request hash: 32 bytes derived from the body.
    static func hash(_ body: String) -> Data {
        var bytes = [UInt8](repeating: 0, count: 32)
        for (index, byte) in body.utf8.enumerated() { bytes[index % 32] = bytes[index % 32] &* 31 &+ byte }
        bytes[31] = UInt8(truncatingIfNeeded: body.utf8.count)
        return Data(bytes)
    }

    func scalar<T: PostgresDecodable>(_ type: T.Type = T.self, _ query: PostgresQuery) async throws -> T {
        try await pool.query(query)[0].decode(T.self, at: 0)
    }

    /// A successful broadcast answer for a claim.
    func delivery(for claim: ClaimedBroadcast, status: Int? = 200, reason: String? = nil) -> DeliveryDraft {
        DeliveryDraft(
            appID: claim.appID, kind: .broadcast, apnsRequestID: UUID(), status: status, reason: reason,
            latencyMicroseconds: 1500, priority: 5, attempt: claim.attempts + 1)
    }
}

enum FixtureError: Error { case stale, missing, notAccepted }

/// `#require` for plain helper code outside a test body.
func require2<T>(_ value: T?) throws -> T {
    guard let value else { throw FixtureError.missing }
    return value
}
