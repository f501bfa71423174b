import APNs
import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Synchronization

/// A fresh migrated database (MARQUEE_TEST_DATABASE_URL) with one app and one attribute type whose
/// `home` and `away` fields are significant, plus helpers for events, channels and updates.
struct PipelineServiceFixture {
    static let available = TestDatabase.available

    let configuration: PostgresConfiguration
    let pool: PostgresPool
    let appID: Int
    let typeID: Int
    let apns = RecordingChannelAPNs()
    let registry = MetricsRegistry()
    let metrics: PipelineMetrics
    let catalog: PostgresPipelineCatalog
    /// Ahead of the database clock, so rows the database stamps with now() are due for it. Ten minutes: under
    /// the full suite a 2-core machine starves a test for minutes at times, and the database's clock must not
    /// overtake; well inside the hour of the priority budget, whose window reaches back to rows stamped by now().
    let clock = ManualWallClock(Date().addingTimeInterval(600).rounded())
    let log = LogCapture()

    var events: EventRepository { EventRepository(pool: pool) }
    var ingest: IngestRepository { IngestRepository(pool: pool) }
    var channels: ChannelRepository { ChannelRepository(pool: pool) }
    var deliveries: DeliveryRepository { DeliveryRepository(pool: pool) }

    static func make(maxConnections: Int = 6) async throws -> PipelineServiceFixture {
        let configuration = try await TestDatabase.fresh("svc")
        let pool = PostgresPool(configuration: configuration, maxConnections: maxConnections)
        try await MigrationRunner(pool: pool).migrate()
        let schema = #"{"home": {"type": "int", "significant": true}, "away": {"type": "int", "significant": true}, "minute": "int?"}"#
        let ids = try await pool.withTransaction { tx in
            let app = try await tx.query(
                """
                INSERT INTO apps (bundle_id, environment, team_id, key_id, key_path)
                VALUES ('com.example.scores', 'development', 'ABCDE12345', 'KEY1234567', 'keys/AuthKey.p8') RETURNING id
                """)[0].decode(Int.self, column: "id")
            let type = try await tx.query(
                """
                INSERT INTO attribute_types (app_id, name, attributes_schema, content_state_schema)
                VALUES (\(app), 'MatchAttributes', \(PostgresJSON("{}")), \(PostgresJSON(schema))) RETURNING id
                """)[0].decode(Int.self, column: "id")
            return [app, type]
        }
        return PipelineServiceFixture(configuration: configuration, pool: pool, appID: ids[0], typeID: ids[1])
    }

    init(configuration: PostgresConfiguration, pool: PostgresPool, appID: Int, typeID: Int) {
        self.configuration = configuration
        self.pool = pool
        self.appID = appID
        self.typeID = typeID
        metrics = PipelineMetrics(registry: registry)
        catalog = PostgresPipelineCatalog(pool: pool)
    }

    var logger: Logger {
        Logger(level: .debug, clock: clock) { [log] line in log.lines.withLock { $0.append(line) } }
    }

    func dispatcher(
        instance: String = "d1", pool: PostgresPool? = nil, budget: Int = 30, clock: (any WallClock)? = nil,
        listen: Bool = false,
        configure: (inout BroadcastDispatcherConfiguration) -> Void = { _ in }
    ) -> BroadcastDispatcher {
        var configuration = BroadcastDispatcherConfiguration(instance: instance)
        configuration.clockDrivesDatabase = clock == nil
        configuration.highPriorityBudget = budget
        configuration.statusSampleInterval = nil
        configure(&configuration)
        return BroadcastDispatcher(
            pool: pool ?? self.pool, listenTo: listen ? self.configuration : nil, apns: apns, catalog: catalog,
            configuration: configuration, metrics: metrics, logger: logger, clock: clock ?? self.clock)
    }

    func scheduler(instance: String = "s1", configure: (inout ChannelSchedulerConfiguration) -> Void = { _ in }) -> ChannelScheduler {
        var configuration = ChannelSchedulerConfiguration(instance: instance)
        configuration.clockDrivesDatabase = true
        configure(&configuration)
        return ChannelScheduler(
            pool: pool, apns: apns, catalog: catalog, configuration: configuration, metrics: metrics,
            logger: logger, clock: clock)
    }

    func makeEvent(
        _ externalID: String = "match-\(UUID().uuidString.prefix(8))", startsAt: Date? = nil, endsAt: Date? = nil,
        storage: MessageStoragePolicy = .mostRecent, state: JSONValue? = ["home": 0, "away": 0]
    ) async throws -> EventRecord {
        try await events.create(
            NewEvent(
                appID: appID, externalID: externalID, kind: .match, attributeTypeID: typeID,
                storagePolicy: storage, startsAt: startsAt ?? clock.now, endsAt: endsAt,
                initialState: state, initialStateAt: state == nil ? nil : clock.now.addingTimeInterval(-3600)))
    }

    /// Drives the event's channel to 'open' as the scheduler would, with a fake Apple id; returns it.
    func openChannel(eventID: Int) async throws -> ChannelRecord {
        let planned = try await channels.createPlanned(eventID: eventID)
        var lifecycle = planned.lifecycle!
        let before = lifecycle
        _ = try lifecycle.leadTimeReached()
        _ = try await channels.transition(channelID: planned.id, from: before, to: lifecycle, now: clock.now)
        let creating = lifecycle
        _ = try lifecycle.createSucceeded()
        let id = apns.makeChannel()
        _ = try await channels.transition(
            channelID: planned.id, from: creating, to: lifecycle, apnsChannelID: id, now: clock.now, broadcasts: .resume)
        return try await channels.get(id: planned.id)!
    }

    /// Ingests a whole-state update.
    @discardableResult
    func post(
        _ eventID: Int, _ state: JSONValue, alert: JSONValue? = nil, priority: RequestedPriority = .auto,
        action: UpdateAction = .update, at occurredAt: Date? = nil
    ) async throws -> IngestedUpdate {
        let draft = UpdateDraft(
            action: action, alert: alert, priority: priority, occurredAt: occurredAt ?? clock.now,
            urgent: alert != nil || priority == .high)
        let result = try await ingest.ingest(
            eventID: eventID, draft, contentState: { _ in state },
            response: { _ in StoredResponse(status: 202, body: Data()) })
        guard case .accepted(let update, _) = result else { throw FixtureFailure.notAccepted }
        return update
    }

    func scalar<T: PostgresDecodable>(_ type: T.Type = T.self, _ query: PostgresQuery) async throws -> T {
        try await pool.query(query)[0].decode(T.self, at: 0)
    }

    func dispositions(eventID: Int) async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for row in try await pool.query("SELECT disposition, count(*) AS n FROM updates WHERE event_id = \(eventID) GROUP BY disposition") {
            counts[try row.decode(String.self, column: "disposition")] = try row.decode(Int.self, column: "n")
        }
        return counts
    }
}

enum FixtureFailure: Error { case notAccepted, notListening }

/// The log lines of a test's services.
final class LogCapture: Sendable {
    let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
}

extension Date {
    /// Whole seconds, so aps timestamps derived from the clock are easy to reason about.
    func rounded() -> Date { Date(timeIntervalSince1970: timeIntervalSince1970.rounded(.down)) }
}

/// An in-memory APNs for the pipeline services: records every call, answers from scripts (FIFO per
/// operation) or, by default, accepts; keeps Apple's channel list.
final class RecordingChannelAPNs: BroadcastChannelAPNs {
    struct Broadcast: Sendable {
        var channelID: String
        var aps: JSONValue
        var expiration: Int64
        var priority: PushPriority
        var bytes: Int
    }

    struct State {
        var broadcasts: [Broadcast] = []
        var creates = 0
        var deletes: [String] = []
        var lists = 0
        var listed: [String] = []
        var broadcastScript: [APNsResult] = []
        var createScript: [APNsResult] = []
        /// The next scripted create's attempt was written and lost its answer (`APNsExchangeAttempt.outcomeUnknown`).
        var nextCreateUnknown = false
        var deleteScript: [APNsResult] = []
        /// Channels each broadcast answer is about (sent concurrently by two dispatchers).
        var sending: [String: Int] = [:]
        var overlaps = 0
        /// How long a broadcast takes to answer.
        var broadcastDelay: Duration = .milliseconds(2)
        var broadcastsStarted = 0
        /// How long a create takes to answer, and the most creates that were in flight at once.
        var createDelay: Duration = .zero
        var createsInFlight = 0
        var mostCreatesInFlight = 0
        /// Creates wait to answer until a test sets this back to false: a create in flight for as long as the
        /// test needs, whatever the machine's speed.
        var createsHeld = false
        /// Failed attempts the client retried by itself before the next broadcast's answer.
        var clientRetriesBeforeNext: [APNsResult] = []
        /// Runs once, before the next broadcast's answer (a test's fault at the worst moment).
        var beforeNextAnswer: (@Sendable () async throws -> Void)?
    }

    let state = Mutex(State())

    var broadcasts: [Broadcast] { state.withLock { $0.broadcasts } }
    var listed: [String] { state.withLock { $0.listed } }

    /// A new channel id in Apple's list (as if created); returns it.
    @discardableResult
    func makeChannel() -> String {
        let id = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
        state.withLock { $0.listed.append(id) }
        return id
    }

    func scriptBroadcasts(_ results: [APNsResult]) { state.withLock { $0.broadcastScript += results } }
    func scriptCreates(_ results: [APNsResult]) { state.withLock { $0.createScript += results } }

    static func failure(_ status: Int, _ reason: APNsReason) -> APNsResult {
        APNsResult(response: APNsResponse(status: status, body: APNsErrorBody(reason: reason).json), operation: .broadcast)
    }

    func createChannel(app: PipelineApp, storagePolicy: MessageStoragePolicy) async throws -> APNsExchange {
        let (scripted, delay) = state.withLock { state -> (APNsResult?, Duration) in
            state.creates += 1
            state.createsInFlight += 1
            state.mostCreatesInFlight = max(state.mostCreatesInFlight, state.createsInFlight)
            return (state.createScript.isEmpty ? nil : state.createScript.removeFirst(), state.createDelay)
        }
        // A slow APNs when a test asks for one (`createDelay`): the delay is the behaviour under test.
        if delay > .zero { try? await Task.sleep(for: delay) }
        _ = try? await eventually(within: .seconds(600)) { !state.withLock { $0.createsHeld } }
        defer { state.withLock { $0.createsInFlight -= 1 } }
        if let scripted {
            let unknown = state.withLock { state in
                defer { state.nextCreateUnknown = false }
                return state.nextCreateUnknown
            }
            return APNsExchange(APNsExchangeAttempt(result: scripted, requestID: UUID().uuidString, outcomeUnknown: unknown))
        }
        let id = makeChannel()
        let response = APNsResponse(status: 201, headers: ["apns-channel-id": id, "apns-request-id": UUID().uuidString])
        return APNsExchange(
            APNsExchangeAttempt(
                result: APNsResult(response: response, operation: .createChannel),
                requestID: UUID().uuidString))
    }

    func deleteChannel(app: PipelineApp, channelID: String) async throws -> APNsExchange {
        let known = state.withLock { state -> Bool in
            state.deletes.append(channelID)
            guard let index = state.listed.firstIndex(of: channelID) else { return false }
            state.listed.remove(at: index)
            return true
        }
        let response = known ? APNsResponse(status: 204) : APNsResponse(status: 400, body: APNsErrorBody(reason: .channelNotRegistered).json)
        return APNsExchange(APNsExchangeAttempt(result: APNsResult(response: response, operation: .deleteChannel)))
    }

    func listChannels(app: PipelineApp) async throws -> APNsExchange {
        let ids = state.withLock { state -> [String] in
            state.lists += 1
            return state.listed
        }
        let body = Array(try JSONSerialization.data(withJSONObject: ["channels": ids]))
        return APNsExchange(
            APNsExchangeAttempt(
                result: APNsResult(
                    response: APNsResponse(status: 200, body: body),
                    operation: .listChannels)))
    }

    func broadcast(
        app: PipelineApp, channelID: String, payload: [UInt8], expiration: Int64,
        priority: PushPriority
    ) async throws -> APNsExchange {
        let aps = try JSONValue(parsing: String(decoding: payload, as: UTF8.self))["aps"] ?? .null
        let scripted = state.withLock { state -> APNsResult? in
            if state.sending[channelID, default: 0] > 0 { state.overlaps += 1 }
            state.sending[channelID, default: 0] += 1
            state.broadcastsStarted += 1
            return state.broadcastScript.isEmpty ? nil : state.broadcastScript.removeFirst()
        }
        // A slow APNs when a test asks for one (`broadcastDelay`, zero by default): the delay is the behaviour under test.
        try? await Task.sleep(for: state.withLock { $0.broadcastDelay })
        if let fault = state.withLock({ state in
            defer { state.beforeNextAnswer = nil }
            return state.beforeNextAnswer
        }) {
            try await fault()
        }
        let result =
            scripted
            ?? APNsResult(
                response: APNsResponse(
                    status: 200,
                    headers: [
                        "apns-request-id": UUID().uuidString,
                        "apns-unique-id": UUID().uuidString,
                    ]),
                operation: .broadcast)
        state.withLock { state in
            state.sending[channelID, default: 1] -= 1
            if result.acceptance != nil {
                state.broadcasts.append(
                    Broadcast(
                        channelID: channelID, aps: aps, expiration: expiration, priority: priority,
                        bytes: payload.count))
            }
        }
        let earlier = state.withLock { state -> [APNsResult] in
            defer { state.clientRetriesBeforeNext = [] }
            return state.clientRetriesBeforeNext
        }
        let attempts = (earlier + [result]).map { APNsExchangeAttempt(result: $0, requestID: UUID().uuidString, latency: .milliseconds(2)) }
        return APNsExchange(result: result, attempts: attempts)
    }
}
