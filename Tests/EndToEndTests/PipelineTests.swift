import APNsSimulator
import Foundation
import MarqueeCore
import MarqueeStore
import Postgres
import Testing

/// `marquee serve` with the real APNs simulator: the scheduler opens an event's channel and the
/// dispatcher broadcasts an accepted update on it.
@Suite(.enabled(if: MarqueeProcess.available))
struct PipelineTests {
    /// Polls `condition` every 100 ms for up to `seconds`.
    static func eventually(_ seconds: Double, _ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try await condition() { return true }
            try await Task.sleep(for: .milliseconds(100))
        }
        return try await condition()
    }

    @Test func serveOpensTheChannelAtTheSimulatorAndBroadcastsAnUpdate() async throws {
        let state = FileManager.default.temporaryDirectory.appending(path: "marquee-e2e-sim-\(UUID().uuidString)").path
        var configuration = SimulatorConfiguration(stateDirectory: state)
        configuration.bundleIDs = ["com.example.scores"]
        let simulator = try await APNsSimulator.start(configuration: configuration)
        let url = try await MarqueeProcess.freshDatabase()

        // serve migrates, then the app is registered with the simulator's key, as an operator would.
        let serve = try MarqueeProcess.start(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"],
                                             databaseURL: url, environment: simulator.environmentVariables)
        let pool = PostgresPool(configuration: PostgresConfiguration(url: url), maxConnections: 2)
        defer { pool.close() }
        #expect(try await Self.eventually(20) {
            (try? await pool.query("SELECT count(*)::bigint AS n FROM schema_migrations")[0].decode(Int.self, column: "n")) ?? 0 > 0
        }, "serve did not migrate: \(serve.stderr)")
        let files = simulator.files
        let added = try await MarqueeProcess.run(
            ["app", "add", "--bundle", "com.example.scores", "--environment", "development", "--team-id", files.teamID,
             "--key-id", files.keyID, "--key-file", files.signingKeyFile, "--json"], databaseURL: url)
        #expect(added.status == 0, "\(added.stderr)")
        let appID = try #require(try JSONValue(parsing: added.stdout)["id"]?.intValue)

        // An event starting in ten minutes is inside the two-hour lead time.
        let typeID = try await pool.query("""
            INSERT INTO attribute_types (app_id, name, attributes_schema, content_state_schema)
            VALUES (\(Int(appID)), 'MatchAttributes', \(PostgresJSON("{}")), \(PostgresJSON(#"{"home":"int","away":"int"}"#))) RETURNING id
            """)[0].decode(Int.self, column: "id")
        let event = try await EventRepository(pool: pool).create(NewEvent(
            appID: Int(appID), externalID: "match-1", kind: .match, attributeTypeID: typeID,
            startsAt: Date().addingTimeInterval(600), endsAt: Date().addingTimeInterval(7200), topics: [],
            initialState: ["home": 0, "away": 0], initialStateAt: Date()))

        let opened = try await Self.eventually(30) {
            let rows = try await pool.query("SELECT apns_channel_id FROM channels WHERE event_id = \(event.id) AND state = 'open'")
            return !rows.isEmpty
        }
        #expect(opened, "the scheduler did not open a channel: \(serve.stderr)")
        let channelID = try await pool.query("SELECT apns_channel_id FROM channels WHERE event_id = \(event.id)")[0]
            .decode(String.self, column: "apns_channel_id")
        #expect(simulator.engine.channels(bundleID: "com.example.scores").map(\.id) == [channelID])

        _ = try await IngestRepository(pool: pool).ingest(
            eventID: event.id, UpdateDraft(occurredAt: Date()), idempotency: nil,
            contentState: { _ in ["home": 1, "away": 0] },
            response: { update in StoredResponse(status: 202, body: Data("{\"id\":\(update.id)}".utf8)) })
        let broadcast = try await Self.eventually(20) { !simulator.engine.broadcasts.isEmpty }
        #expect(broadcast, "no broadcast reached the simulator: \(serve.stderr)")
        let received = try #require(simulator.engine.broadcasts.last)
        #expect(received.channelID == channelID)
        #expect(received.json["aps"]?["event"] == "update")
        #expect(received.json["aps"]?["content-state"] == ["home": 1, "away": 0])

        serve.signal(SIGTERM)
        #expect(await serve.wait() == 0, "\(serve.stderr)")
        await simulator.shutdown()
        try? FileManager.default.removeItem(atPath: state)
    }
}
