// What `marquee serve` runs, assembled in one place so later features plug in at two points:
// `routes` (one APIRoutes value per feature area) and `services` (one Service per long-running part,
// e.g. the broadcast dispatcher and the scheduler). Everything shares one pool, registry and logger.
import Foundation
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// The settings of `marquee serve`.
public struct ServeConfiguration: Sendable {
    public var databaseURL: String
    /// A numeric address and a port; port 0 picks a free one (logged as `listening`).
    public var host: String
    public var port: Int
    /// Apply pending migrations at start (else refuse to start when the schema is behind).
    public var migrate: Bool
    /// How long in-flight work gets after SIGTERM.
    public var gracePeriod: Duration
    public var maxConnections: Int
    /// APNs endpoints and CA, carried for the broadcast pipeline (nil: Apple's hosts and the system CAs).
    public var apnsPushURL: String?
    public var apnsManageURL: String?
    public var apnsCAFile: String?

    public init(databaseURL: String, host: String = "127.0.0.1", port: Int = 8080, migrate: Bool = true,
                gracePeriod: Duration = .seconds(30), maxConnections: Int = 10,
                apnsPushURL: String? = nil, apnsManageURL: String? = nil, apnsCAFile: String? = nil) {
        self.databaseURL = databaseURL
        self.host = host
        self.port = port
        self.migrate = migrate
        self.gracePeriod = gracePeriod
        self.maxConnections = maxConnections
        self.apnsPushURL = apnsPushURL
        self.apnsManageURL = apnsManageURL
        self.apnsCAFile = apnsCAFile
    }

    /// Parses `host:port` (`[::1]:8080` for IPv6); nil when malformed.
    public static func parseListen(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return (host, port)
    }
}

/// The daemon: database, API and services.
public final class MarqueeDaemon: Sendable {
    public let configuration: ServeConfiguration
    public let pool: PostgresPool
    public let metrics: MetricsRegistry
    public let logger: Logger
    public let keys: APIKeyVerifier
    /// Cached attribute types, shared by the API and (later) the ingest path.
    public let attributeTypes: AttributeTypeCatalog
    public let api: APIServer

    public init(configuration: ServeConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        let pool = PostgresPool(configuration: PostgresConfiguration(url: configuration.databaseURL),
                                maxConnections: configuration.maxConnections)
        let metrics = MetricsRegistry()
        let keys = APIKeyVerifier(lookup: APIKeyRepository(pool: pool))
        self.pool = pool
        self.metrics = metrics
        self.keys = keys
        let attributeTypes = AttributeTypeCatalog(repository: AttributeTypeRepository(pool: pool))
        self.attributeTypes = attributeTypes
        self.api = APIServer(routes: Self.routes(pool: pool, metrics: metrics, attributeTypes: attributeTypes), keys: keys, metrics: metrics,
                             logger: logger.with(["component": "api"]))
    }

    /// The API's feature areas. A new area adds its `APIRoutes` here (and its paths to the OpenAPI document).
    public static func routes(pool: PostgresPool, metrics: MetricsRegistry, attributeTypes: AttributeTypeCatalog? = nil) -> [any APIRoutes] {
        let apps = AppRepository(pool: pool)
        let attributeTypes = attributeTypes ?? AttributeTypeCatalog(repository: AttributeTypeRepository(pool: pool))
        return [
            SystemRoutes(pool: pool, metrics: metrics, processMetrics: ProcessMetrics(registry: metrics)),
            AppRoutes(apps: apps),
            AttributeTypeRoutes(apps: apps, types: attributeTypes),
        ]
    }

    /// The long-running parts, given the HTTP service. The broadcast pipeline adds its services here.
    public func services(http: any Service) -> [any Service] {
        [http]
    }

    /// Migrates (or, with `migrate` off, requires a current schema); returns the migrations applied.
    public func prepareDatabase() async throws -> [String] {
        let runner = MigrationRunner(pool: pool)
        guard configuration.migrate else {
            try await runner.requireCurrentSchema()
            return []
        }
        return try await runner.migrate()
    }

    /// Prepares the database, then runs every service until SIGTERM or SIGINT and a graceful stop.
    public func run(http makeHTTP: (MarqueeDaemon) throws -> any Service) async throws {
        let applied = try await prepareDatabase()
        logger.info("database ready", ["migrations_applied": .int(applied.count)])
        let group = ServiceGroup(services: services(http: try makeHTTP(self)), gracePeriod: configuration.gracePeriod, logger: logger)
        defer { pool.close() }
        try await group.run()
        logger.info("stopped")
    }
}
