// What the operator commands share: the database option, opening a pool, and turning database
// failures into exit codes (69 when PostgreSQL cannot be reached).
import MarqueeCommandLine
import MarqueeStore
import Postgres

enum Database {
    /// `--database-url`, falling back to MARQUEE_DATABASE_URL.
    static let option = Argument.option(
        "database-url", value: "URL", help: "PostgreSQL connection URL.", environment: "MARQUEE_DATABASE_URL", required: true)

    /// Runs `body` with a small pool, closing it after; database failures become CommandFailures.
    static func withPool<T: Sendable>(_ arguments: ParsedArguments, _ body: (PostgresPool) async throws -> T) async throws -> T {
        let pool = PostgresPool(configuration: PostgresConfiguration(url: try arguments.required("database-url")), maxConnections: 2)
        defer { pool.close() }
        do {
            return try await body(pool)
        } catch let error as PostgresError {
            throw failure(error)
        }
    }

    static func failure(_ error: PostgresError) -> CommandFailure {
        switch error.kind {
        case .connectionFailed, .connectionLost, .poolClosed:
            CommandFailure("cannot reach the database: \(error.message)", exitCode: .unavailable, code: "database_unavailable")
        default:
            CommandFailure("database error: \(error)", exitCode: .failure, code: "database_error")
        }
    }
}
