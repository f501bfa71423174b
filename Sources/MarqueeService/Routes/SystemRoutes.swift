// The routes a process answers without a key: liveness, readiness, metrics and the OpenAPI document.
import MarqueeCore
import MarqueeStore
import Network
import Postgres

/// `/healthz`, `/readyz`, `/metrics` and `/openapi.json`.
public struct SystemRoutes: APIRoutes {
    private let pool: PostgresPool
    private let metrics: MetricsRegistry
    private let processMetrics: ProcessMetrics
    private let readinessTimeout: Duration

    /// How long `/readyz` waits for the database before it answers 503.
    public static let defaultReadinessTimeout: Duration = .seconds(2)

    public init(
        pool: PostgresPool, metrics: MetricsRegistry, processMetrics: ProcessMetrics, readinessTimeout: Duration = defaultReadinessTimeout
    ) {
        self.pool = pool
        self.metrics = metrics
        self.processMetrics = processMetrics
        self.readinessTimeout = readinessTimeout
    }

    public func register(in table: inout RouteTable) {
        table.add("GET", "/healthz", access: .open) { _ in .json(["status": "ok"]) }
        table.add("GET", "/readyz", access: .open) { [pool, readinessTimeout] _ in
            do {
                try await withDeadline(readinessTimeout) { try await MigrationRunner(pool: pool).requireCurrentSchema() }
                return .json(["status": "ready"])
            } catch let error as MigrationError {
                return APIError.unavailable("the database schema is not current: \(error)").response
            } catch {
                return APIError.unavailable("the database cannot be reached").response
            }
        }
        table.add("GET", "/metrics", access: .open) { [metrics, processMetrics] _ in
            processMetrics.sample()
            return HTTPResponse(
                status: 200, headers: ["content-type": "text/plain; version=0.0.4; charset=utf-8"],
                body: Array(metrics.render().utf8))
        }
        table.add("GET", "/openapi.json", access: .open) { _ in
            HTTPResponse(status: 200, headers: ["content-type": "application/json"], body: Array(OpenAPIDocument.text.utf8))
        }
    }
}

/// The operation did not finish in time.
struct DeadlineExceeded: Error {}

/// Runs `body`, throwing `DeadlineExceeded` (and cancelling it) when it takes longer than `limit`.
func withDeadline<T: Sendable>(_ limit: Duration, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw DeadlineExceeded()
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}
