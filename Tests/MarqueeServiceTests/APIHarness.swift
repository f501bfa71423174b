import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import MarqueeTestSupport
import Network
import Postgres
import Synchronization

/// A fresh, migrated database per test (from MARQUEE_TEST_DATABASE_URL, set by Scripts/test) and the
/// daemon's real route table behind an APIServer, driven request by request without sockets.
struct APIHarness {
    static let available = TestDatabase.available

    let pool: PostgresPool
    let api: APIServer
    let keys: APIKeyVerifier
    let metrics: MetricsRegistry
    let logLines: LogLines

    final class LogLines: Sendable {
        let lines = Mutex<[String]>([])
        var all: [String] { lines.withLock { $0 } }
    }

    static func make(migrated: Bool = true, keyCache: Duration = .seconds(10)) async throws -> APIHarness {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh("service"), maxConnections: 4)
        if migrated { try await MigrationRunner(pool: pool).migrate() }
        let metrics = MetricsRegistry()
        let keys = APIKeyVerifier(lookup: APIKeyRepository(pool: pool), cacheDuration: keyCache)
        let logLines = LogLines()
        let logger = Logger(level: .debug, format: .logfmt) { line in logLines.lines.withLock { $0.append(line) } }
        let api = APIServer(routes: MarqueeDaemon.testRoutes(pool: pool, metrics: metrics), keys: keys, metrics: metrics, logger: logger)
        return APIHarness(pool: pool, api: api, keys: keys, metrics: metrics, logLines: logLines)
    }

    /// Stores a new key with `scope` and returns its text.
    func key(_ scope: APIScope) async throws -> String {
        let key = NewAPIKey.generate()
        _ = try await APIKeyRepository(pool: pool).create(
            keyID: key.id, name: "test \(scope)", scopes: [scope.rawValue],
            salt: key.salt, hash: key.hash)
        return key.text
    }

    /// Adds an app; returns its id.
    func app(bundle: String = "com.example.scores", environment: String = "development") async throws -> Int {
        try await AppRepository(pool: pool).add(
            NewApp(
                bundleID: bundle, environment: environment, teamID: "ABCDE12345",
                keyID: "KEY1234567", keyPath: "keys/AuthKey.p8")
        ).id
    }

    struct Answer {
        let response: HTTPResponse
        var status: Int { response.status }
        var json: JSONValue? { try? JSONValue(parsing: response.body) }
        var errorCode: String? { json?["error"]?["code"]?.stringValue }
        var errorField: String? { json?["error"]?["field"]?.stringValue }
        var text: String { String(decoding: response.body, as: UTF8.self) }
    }

    func send(
        _ method: String, _ path: String, key: String? = nil, body: String? = nil,
        contentType: String? = "application/json"
    ) async -> Answer {
        await send(method, path, key: key, bytes: body.map { Array($0.utf8) }, contentType: contentType)
    }

    func send(_ method: String, _ path: String, key: String? = nil, bytes: [UInt8]?, contentType: String? = "application/json") async -> Answer {
        var headers = HTTPHeaders()
        if let key { headers.add("authorization", "Bearer \(key)") }
        if bytes != nil, let contentType { headers.add("content-type", contentType) }
        return Answer(response: await api.respond(to: HTTPRequest(method: method, path: path, headers: headers, body: bytes ?? [])))
    }

    func count(_ table: String) async throws -> Int {
        try await pool.query("SELECT count(*)::bigint AS n FROM \(identifier: table)")[0].decode(Int.self, column: "n")
    }
}

extension MarqueeDaemon {
    /// The daemon's routes over `pool`, with a scheduler whose APNs clients come from the apps' stored
    /// keys and Apple's hosts (unreachable from tests: a test that needs APNs uses the simulator).
    static func testRoutes(pool: PostgresPool, metrics: MetricsRegistry) -> [any APIRoutes] {
        let clients = APNsClientDirectory(apps: AppRepository(pool: pool), environment: [:])
        let scheduler = ChannelScheduler(
            pool: pool, apns: APNsClientGateway { app in try await clients.client(for: app) },
            catalog: PostgresPipelineCatalog(pool: pool), configuration: ChannelSchedulerConfiguration(instance: "api-tests"),
            metrics: PipelineMetrics(registry: metrics), logger: Logger { _ in })
        // The readiness probe's 2 s deadline is for a live service; under the full suite a 2-core machine can
        // starve a test longer, which would read as an unreachable database.
        return routes(pool: pool, metrics: metrics, scheduler: scheduler, readinessTimeout: .seconds(60))
    }
}

/// A complete attribute-type document (docs/schemas.md's football example, trimmed).
enum Fixtures {
    static func matchType(app: Int, name: String = "MatchAttributes") -> String {
        """
        {
          "app": \(app),
          "name": "\(name)",
          "attributes": { "homeTeam": "string", "awayTeam": "string", "kickoff": "date" },
          "contentState": {
            "homeScore": { "type": "int", "significant": true },
            "awayScore": { "type": "int", "significant": true },
            "period": { "type": "enum", "values": ["scheduled", "firstHalf", "halfTime", "secondHalf", "fullTime"] },
            "minute": "int",
            "lastScorer": "string?",
            "kickoff": "date",
            "halfWindow": "dateRange?",
            "goals": { "type": "array", "items": { "type": "object", "fields": { "scorer": "string", "minute": "int" } } }
          }
        }
        """
    }
}
