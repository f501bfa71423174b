// One broadcast-pipeline test world: a fresh database, an in-process APNs simulator, an app registered with
// the simulator's key by `marquee app add`, an admin key from `marquee key create`, the MatchAttributes type
// registered over HTTP, and one or more `marquee serve` processes with short pipeline settings. Tests talk
// to it only as users do (HTTP, the CLI, the simulator's records) and read the database to count rows.
import APNs
import APNsSimulator
import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Synchronization
import Testing

/// A database, a simulator and `marquee serve` processes wired together for one test.
final class BroadcastHarness: Sendable {
    static let bundleID = "com.example.scores"
    /// Short pipeline settings so a test sees channels open, broadcasts conflate and ends happen in seconds.
    static let pipelineArguments = [
        "--scheduler-interval", "0.2", "--conflation-interval", "1", "--channel-delete-delay", "1", "--end-grace", "1",
        "--broadcast-ttl", "600", "--reconcile-interval", "3600",
    ]
    static let conflationInterval: TimeInterval = 1
    static let broadcastTTL = 600

    let simulator: APNsSimulator
    let databaseURL: String
    let pool: PostgresPool
    let adminKey: String
    let appID: Int
    private let stateDirectory: String
    private let serveArguments: [String]
    /// The serve processes and their ports; `killAndRestart` replaces one.
    private let processes: Mutex<(serves: [ChildProcess], ports: [Int])>
    var serves: [ChildProcess] { processes.withLock { $0.serves } }
    var ports: [Int] { processes.withLock { $0.ports } }

    private init(
        simulator: APNsSimulator, databaseURL: String, pool: PostgresPool, serves: [ChildProcess], ports: [Int],
        adminKey: String, appID: Int, stateDirectory: String, serveArguments: [String]
    ) {
        self.simulator = simulator
        self.databaseURL = databaseURL
        self.pool = pool
        processes = Mutex((serves, ports))
        self.adminKey = adminKey
        self.appID = appID
        self.stateDirectory = stateDirectory
        self.serveArguments = serveArguments
    }

    /// Kills serve number `instance` with SIGKILL (nothing released, no graceful stop) and starts a new one
    /// with the same settings in its place: a new process, instance name and port.
    /// `environment` adjusts the new process's variables (the simulator's hosts and CA, by default).
    func killAndRestart(instance: Int = 0, environment adjust: (inout [String: String]) -> Void = { _ in }) async throws {
        await kill(instance: instance)
        try await restart(instance: instance, environment: adjust)
    }

    /// Starts a serve as number `instance` (after `kill(instance:)`).
    func restart(instance: Int = 0, environment adjust: (inout [String: String]) -> Void = { _ in }) async throws {
        var environment = simulator.environmentVariables
        adjust(&environment)
        let (process, port) = try await MarqueeProcess.serve(
            databaseURL: databaseURL, arguments: Self.pipelineArguments + serveArguments, environment: environment)
        processes.withLock { state in
            state.serves.insert(process, at: instance)
            state.ports.insert(port, at: instance)
        }
    }

    /// Kills serve number `instance` with SIGKILL and forgets it: the next one takes its number.
    func kill(instance: Int) async {
        let killed = serves[instance]
        killed.signal(SIGKILL)
        _ = await killed.wait()
        processes.withLock { state in
            state.serves.remove(at: instance)
            state.ports.remove(at: instance)
        }
    }

    /// Builds the world, runs `body` and always tears the world down (serve gets SIGTERM and must exit 0).
    /// `simulator` adjusts the simulator's configuration (quota, faults) before it starts.
    /// With `appBackend`, the simulated devices register the activities they start with serve (one
    /// instance, on a port chosen ahead), as an app's backend would. `database` is an empty database's URL (default: a
    /// new database on the test cluster), e.g. on a cluster of the test's own that it stops.
    static func run<T>(
        simulator: (inout SimulatorConfiguration) -> Void = { _ in }, instances: Int = 1, serveArguments: [String] = [],
        appBackend: Bool = false, database: String? = nil, _ body: (BroadcastHarness) async throws -> T
    ) async throws -> T {
        let harness =
            appBackend
            ? try await startWithAppBackend(simulator: simulator, instances: instances, serveArguments: serveArguments)
            : try await start(simulator: simulator, instances: instances, serveArguments: serveArguments, backendKey: nil, database: database)
        do {
            let registered = try await harness.api("POST", "/v1/attribute-types", MatchState.attributeType(app: harness.appID))
            try #require(registered.status == 201, "POST /v1/attribute-types: \(registered.text)")
            let result = try await body(harness)
            // Every payload APNs accepted in the test must decode as the app declares it.
            for broadcast in harness.simulator.engine.broadcasts {
                #expect(throws: Never.self, "\(String(decoding: broadcast.payload, as: UTF8.self))") {
                    try JSONDecoder().decode(ActivityPush.self, from: Data(broadcast.payload))
                }
            }
            await harness.stop()
            return result
        } catch {
            await harness.stop()
            throw error
        }
    }

    /// `start` with the simulator calling serve as the app backend. The simulator needs serve's address first,
    /// so serve's port is chosen ahead and released; another test's server can take it before serve binds it,
    /// and then the start is tried again with another port (three tries).
    private static func startWithAppBackend(
        simulator: (inout SimulatorConfiguration) -> Void, instances: Int, serveArguments: [String]
    ) async throws -> BroadcastHarness {
        var attempt = 1
        while true {
            let key = NewAPIKey.generate()
            let port = AdminCLITests.freePort()
            do {
                return try await start(
                    simulator: { configuration in
                        simulator(&configuration)
                        configuration.appBackend = SimulatorAppBackend(url: "http://127.0.0.1:\(port)", apiKey: key.text)
                    }, instances: instances, serveArguments: serveArguments + ["--listen", "127.0.0.1:\(port)"], backendKey: key)
            } catch let failure as LoopbackHTTP.Failure where attempt < 3 && failure.description.contains("Address already in use") {
                attempt += 1
            }
        }
    }

    private static func start(
        simulator adjust: (inout SimulatorConfiguration) -> Void, instances: Int, serveArguments: [String], backendKey: NewAPIKey?,
        database: String? = nil
    ) async throws -> BroadcastHarness {
        let state = FileManager.default.temporaryDirectory.appending(path: "marquee-e2e-sim-\(UUID().uuidString)").path
        var configuration = SimulatorConfiguration(stateDirectory: state)
        configuration.bundleIDs = [bundleID]
        adjust(&configuration)
        let simulator = try await APNsSimulator.start(configuration: configuration)
        do {
            var url = database ?? ""
            if database == nil { url = try await TestDatabase.freshURL("e2e") }
            let migrated = try await MarqueeProcess.run(["migrate"], databaseURL: url)
            try #require(migrated.status == 0, "marquee migrate: \(migrated.stderr)")
            let files = simulator.files
            let added = try await MarqueeProcess.run(
                [
                    "app", "add", "--bundle", bundleID, "--environment", "development", "--team-id", files.teamID,
                    "--key-id", files.keyID, "--key-file", files.signingKeyFile, "--json",
                ], databaseURL: url)
            try #require(added.status == 0, "marquee app add: \(added.stderr)")
            let appID = try #require(try JSONValue(parsing: added.stdout)["id"]?.intValue)
            let created = try await MarqueeProcess.run(["key", "create", "--scope", "admin", "--json"], databaseURL: url)
            try #require(created.status == 0, "marquee key create: \(created.stderr)")
            let key = try #require(try JSONValue(parsing: created.stdout)["key"]?.stringValue)
            if let backendKey {
                let keys = PostgresPool(configuration: PostgresConfiguration(url: url), maxConnections: 1)
                defer { keys.close() }
                _ = try await APIKeyRepository(pool: keys).create(
                    keyID: backendKey.id, name: "app-backend", scopes: ["tokens"], salt: backendKey.salt, hash: backendKey.hash)
            }

            var serves: [ChildProcess] = []
            var ports: [Int] = []
            for _ in 0..<instances {
                let (process, port) = try await MarqueeProcess.serve(
                    databaseURL: url, arguments: pipelineArguments + serveArguments, environment: simulator.environmentVariables)
                serves.append(process)
                ports.append(port)
            }
            return BroadcastHarness(
                simulator: simulator, databaseURL: url, pool: PostgresPool(configuration: PostgresConfiguration(url: url), maxConnections: 2),
                serves: serves, ports: ports, adminKey: key, appID: Int(appID), stateDirectory: state, serveArguments: serveArguments)
        } catch {
            await simulator.shutdown()
            try? FileManager.default.removeItem(atPath: state)
            throw error
        }
    }

    /// SIGTERM to every serve (each must exit 0 within 20 s, else it is killed), then the simulator stops.
    func stop() async {
        for serve in serves where serve.isRunning { serve.signal(SIGTERM) }
        for serve in serves {
            // A guard, not a wait: only a serve that does not stop reaches it (and fails the expectation below).
            let exited = Task {
                try await Task.sleep(for: .seconds(20))
                serve.signal(SIGKILL)
            }
            let status = await serve.wait()
            exited.cancel()
            #expect(status == 0, "serve did not stop cleanly on SIGTERM: \(Self.tail(serve.stderr))")
        }
        pool.close()
        await simulator.shutdown()
        try? FileManager.default.removeItem(atPath: stateDirectory)
    }

    /// A new API key with one scope, made by `marquee key create`.
    func key(scope: String) async throws -> String {
        let created = try await MarqueeProcess.run(["key", "create", "--scope", scope, "--json"], databaseURL: databaseURL)
        try #require(created.status == 0, "marquee key create: \(created.stderr)")
        return try #require(try JSONValue(parsing: created.stdout)["key"]?.stringValue)
    }

    // MARK: - HTTP

    /// An API answer: the status, the body as JSON (null when empty or not JSON) and as text.
    struct Response {
        let status: Int
        let body: [UInt8]
        /// Header names in lower case.
        var headers: [String: String] = [:]
        var json: JSONValue { (try? JSONValue(parsing: body)) ?? .null }
        var text: String { String(decoding: body, as: UTF8.self) }
        var errorCode: String? { json["error"]?["code"]?.stringValue }
    }

    /// One request with the admin key to serve number `instance`.
    func api(
        _ method: String, _ path: String, _ body: JSONValue? = nil, headers: [String: String] = [:], instance: Int = 0,
        key: String? = nil
    ) async throws -> Response {
        var all = ["Authorization": "Bearer \(key ?? adminKey)"]
        if body != nil { all["Content-Type"] = "application/json" }
        all.merge(headers) { $1 }
        let response = try await LoopbackHTTP.request(port: ports[instance], method, path, headers: all, body: body?.jsonBytes ?? [])
        return Response(status: response.status, body: response.body, headers: response.headers)
    }

    /// The sum of a Prometheus counter's samples on serve number `instance` whose labels contain every `labels` pair.
    func metric(_ name: String, _ labels: [String: String] = [:], instance: Int = 0) async throws -> Double {
        let text = try await LoopbackHTTP.request(port: ports[instance], "GET", "/metrics").text
        var sum = 0.0
        for line in text.split(separator: "\n") where line.hasPrefix(name + "{") || line.hasPrefix(name + " ") {
            guard labels.allSatisfy({ line.contains("\($0.key)=\"\($0.value)\"") }), let value = line.split(separator: " ").last else { continue }
            sum += Double(value) ?? 0
        }
        return sum
    }

    /// `POST /v1/events` for a match; returns the event id (the answer must be 201).
    func createEvent(
        _ externalID: String, startsAt: Date = Date().addingTimeInterval(600), endsAt: Date? = nil,
        storagePolicy: String? = nil, state: MatchState = MatchState(), instance: Int = 0
    ) async throws -> Int {
        var body: JSONObject = [
            "app": .int(Int64(appID)), "externalId": .string(externalID), "kind": "match", "attributeType": "MatchAttributes",
            "attributes": ["homeTeam": "Arsenal", "awayTeam": "Chelsea"], "contentState": state.input,
            "startsAt": .string(Self.iso(startsAt)), "topics": ["team:arsenal"],
        ]
        body["endsAt"] = .string(Self.iso(endsAt ?? startsAt.addingTimeInterval(7200)))
        if let storagePolicy { body["storagePolicy"] = .string(storagePolicy) }
        let response = try await api("POST", "/v1/events", .object(body), instance: instance)
        try #require(response.status == 201, "POST /v1/events: \(response.status) \(response.text)")
        return Int(try #require(response.json["id"]?.intValue, "no id in \(response.text)"))
    }

    /// `POST /v1/events/{id}/updates` with a whole content-state and optional extra members.
    func update(_ event: Int, _ state: MatchState, extra: JSONObject = [:], headers: [String: String] = [:], instance: Int = 0)
        async throws -> Response
    {
        var body: JSONObject = ["contentState": state.input]
        for (key, value) in extra { body[key] = value }
        return try await api("POST", "/v1/events/\(event)/updates", .object(body), headers: headers, instance: instance)
    }

    /// `GET /v1/events/{id}` (must answer 200).
    func event(_ id: Int, instance: Int = 0) async throws -> JSONValue {
        let response = try await api("GET", "/v1/events/\(id)", instance: instance)
        try #require(response.status == 200, "GET /v1/events/\(id): \(response.status) \(response.text)")
        return response.json
    }

    /// Waits until the event's channel is open; returns its APNs channel id.
    func openChannel(of event: Int, timeout: Double = 30, instance: Int = 0) async throws -> String {
        var channel: JSONValue?
        try await waitUntil("event \(event)'s channel opens", timeout: timeout) {
            channel = try await self.event(event, instance: instance)["channel"]
            return channel?["state"] == "open" && channel?["apnsChannelId"]?.stringValue != nil
        }
        return try #require(channel?["apnsChannelId"]?.stringValue)
    }

    // MARK: - What the simulator received

    /// Broadcasts the simulator accepted on one channel, oldest first.
    func broadcasts(on channel: String) -> [ReceivedBroadcast] {
        simulator.engine.broadcasts.filter { $0.channelID == channel }
    }

    /// Every broadcast on the channel decoded as the app does; a payload that does not decode fails the test.
    func pushes(on channel: String) throws -> [(broadcast: ReceivedBroadcast, push: ActivityPush)] {
        try broadcasts(on: channel).map { broadcast in
            do {
                return (broadcast, try JSONDecoder().decode(ActivityPush.self, from: Data(broadcast.payload)))
            } catch {
                Issue.record("a broadcast the app cannot decode: \(String(decoding: broadcast.payload, as: UTF8.self)): \(error)")
                throw error
            }
        }
    }

    /// Waits until the newest broadcast on the channel carries `state`; returns every push decoded.
    @discardableResult
    func waitForState(_ state: MatchState, on channel: String, timeout: Double = 30) async throws
        -> [(broadcast: ReceivedBroadcast, push: ActivityPush)]
    {
        var pushes: [(broadcast: ReceivedBroadcast, push: ActivityPush)] = []
        try await waitUntil("the channel's newest broadcast carries minute \(state.minute)", timeout: timeout) {
            pushes = try self.pushes(on: channel)
            return pushes.last?.push.aps.contentState == state
        }
        return pushes
    }

    // MARK: - The database

    /// A single integer from SQL (`n`).
    func count(_ query: PostgresQuery) async throws -> Int {
        try await pool.query(query)[0].decode(Int.self, column: "n")
    }

    /// Update rows of an event by disposition.
    func dispositions(of event: Int) async throws -> [String: Int] {
        let rows = try await pool.query(
            """
            SELECT disposition, count(*)::bigint AS n FROM updates WHERE event_id = \(event) GROUP BY disposition
            """)
        var result: [String: Int] = [:]
        for row in rows { result[try row.decode(String.self, column: "disposition")] = try row.decode(Int.self, column: "n") }
        return result
    }

    /// Waits until none of the event's updates is pending (APNs answers before the dispatcher records), then
    /// returns the update rows by disposition.
    func settledDispositions(of event: Int, timeout: Double = 30) async throws -> [String: Int] {
        var dispositions: [String: Int] = [:]
        try await waitUntil("no update of event \(event) is pending", timeout: timeout) {
            dispositions = try await self.dispositions(of: event)
            return dispositions["pending"] == nil
        }
        return dispositions
    }

    // MARK: - Waiting

    /// Something a test waited for did not happen in time; the text names it and shows serve's log.
    struct Timeout: Error, CustomStringConvertible {
        let description: String
    }

    /// Polls `condition` (MarqueeTestSupport's `eventually`) until it holds; after `timeout` seconds throws, naming
    /// what did not happen and showing the end of each serve's log. The default is a hang guard, not a timing check: in a
    /// fresh clone's full run on two cores, claims and a scheduled end have taken over 30 s to appear.
    func waitUntil(_ what: String, timeout: Double = 120, _ condition: () async throws -> Bool) async throws {
        if try await eventually(within: .seconds(timeout), every: .milliseconds(50), condition) { return }
        throw Timeout(
            description: "timed out after \(timeout) s waiting until \(what)\n"
                + serves.enumerated().map { "serve \($0.offset):\n\(Self.tail($0.element.stderr))" }.joined(separator: "\n"))
    }

    static func tail(_ log: String, lines: Int = 30) -> String {
        log.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }

    /// ISO 8601 with `Z` and milliseconds, as the API takes dates.
    static func iso(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    /// Runs `body` with an APNs client of its own on the simulator's key, to act behind Marquee's back.
    func behindMarquee<T>(_ body: (APNsClient) async throws -> T) async throws -> T {
        let client = try APNsClient(signingKey: simulator.files.apnsSigningKey(), endpoints: simulator.endpoints)
        do {
            let result = try await body(client)
            await client.shutdown()
            return result
        } catch {
            await client.shutdown()
            throw error
        }
    }
}

// MARK: - The app's side

/// `MatchAttributes.ContentState` exactly as an app declares it; the simulator's payloads must decode into it
/// with a plain `JSONDecoder()` (dates as seconds since 2001, a `ClosedRange<Date>` as `[lower, upper]`).
struct MatchState: Codable, Hashable, Sendable {
    /// The match period, a `String`-backed enum as the schema's `enum` field declares it.
    enum Period: String, Codable, Hashable, Sendable {
        case scheduled, firstHalf, halfTime, secondHalf, fullTime
    }

    var homeScore = 0
    var awayScore = 0
    var period = Period.scheduled
    var minute = 0
    var lastScorer: String?
    var kickoff = MatchState.kickoffDate
    var halfWindow: ClosedRange<Date>?

    /// Whole milliseconds, so what the app decodes equals what the test sent.
    static let kickoffDate = Date(timeIntervalSince1970: 1_795_982_400.25)

    /// The state as an ingester sends it: dates as ISO 8601 text, the range as `{"lower", "upper"}`.
    var input: JSONValue {
        var object: JSONObject = [
            "homeScore": .int(Int64(homeScore)), "awayScore": .int(Int64(awayScore)), "period": .string(period.rawValue),
            "minute": .int(Int64(minute)), "kickoff": .string(BroadcastHarness.iso(kickoff)),
        ]
        if let lastScorer { object["lastScorer"] = .string(lastScorer) }
        if let halfWindow {
            object["halfWindow"] = [
                "lower": .string(BroadcastHarness.iso(halfWindow.lowerBound)),
                "upper": .string(BroadcastHarness.iso(halfWindow.upperBound)),
            ]
        }
        return .object(object)
    }

    /// The `POST /v1/attribute-types` body for this struct (docs/schemas.md).
    static func attributeType(app: Int) -> JSONValue {
        [
            "app": .int(Int64(app)), "name": "MatchAttributes",
            "attributes": ["homeTeam": "string", "awayTeam": "string"],
            "contentState": [
                "homeScore": ["type": "int", "significant": true],
                "awayScore": ["type": "int", "significant": true],
                "period": [
                    "type": "enum", "values": ["scheduled", "firstHalf", "halfTime", "secondHalf", "fullTime"],
                    "significant": true,
                ],
                "minute": "int",
                "lastScorer": "string?",
                "kickoff": "date",
                "halfWindow": "dateRange?",
            ],
        ]
    }
}

/// A Live Activity push as the device reads it: `aps` with Apple's hyphenated keys; `timestamp`,
/// `stale-date` and `dismissal-date` are Unix seconds (the system reads them, not the app's decoder).
struct ActivityPush: Decodable, Sendable {
    /// The `aps` dictionary of a Live Activity push.
    struct APS: Decodable, Sendable {
        var timestamp: Int
        var event: String
        var contentState: MatchState?
        var staleDate: Int?
        var dismissalDate: Int?
        var relevanceScore: Double?
        var alert: Alert?

        enum CodingKeys: String, CodingKey {
            case timestamp, event, alert
            case contentState = "content-state"
            case staleDate = "stale-date"
            case dismissalDate = "dismissal-date"
            case relevanceScore = "relevance-score"
        }
    }

    /// A title or body: text, or a localization key with arguments.
    enum AlertText: Decodable, Sendable, Equatable {
        case plain(String)
        case localized(key: String, arguments: [String])

        private struct Localized: Decodable {
            var key: String
            var arguments: [String]?
            enum CodingKeys: String, CodingKey {
                case key = "loc-key"
                case arguments = "loc-args"
            }
        }

        init(from decoder: any Decoder) throws {
            if let text = try? decoder.singleValueContainer().decode(String.self) {
                self = .plain(text)
            } else {
                let localized = try Localized(from: decoder)
                self = .localized(key: localized.key, arguments: localized.arguments ?? [])
            }
        }
    }

    /// `aps.alert`, with `sound` inside it as Apple's Live Activity samples have it.
    struct Alert: Decodable, Sendable {
        var title: AlertText
        var body: AlertText
        var sound: String?
    }

    var aps: APS
}
