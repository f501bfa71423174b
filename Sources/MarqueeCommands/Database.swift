// What the operator commands share: the database option, opening a pool, and turning database
// failures into exit codes (69 when PostgreSQL cannot be reached).
import MarqueeCommandLine
import MarqueeStore
import Postgres

enum Database {
    /// `--database-url`, falling back to MARQUEE_DATABASE_URL.
    static let option = Argument.option(
        "database-url", value: "URL", help: "PostgreSQL connection URL.", environment: "MARQUEE_DATABASE_URL", required: true)

    /// `--database-url`, checked: a `postgresql://` (or `postgres://`) URL, or libpq's `key=value` settings. Anything
    /// else libpq would take for a database name on the local socket, and answer with a socket error.
    static func url(_ arguments: ParsedArguments) throws(UsageError) -> String {
        let url = try arguments.required("database-url")
        guard url.hasPrefix("postgresql://") || url.hasPrefix("postgres://") || url.contains("=") else {
            throw UsageError(
                "--database-url takes a PostgreSQL URL such as postgresql://marquee@127.0.0.1:5432/marquee, not '\(url)'",
                field: "database-url", commandPath: arguments.commandPath)
        }
        return url
    }

    /// Runs `body` with a small pool, closing it after; database failures become CommandFailures.
    static func withPool<T: Sendable>(_ arguments: ParsedArguments, _ body: (PostgresPool) async throws -> T) async throws -> T {
        let pool = PostgresPool(configuration: PostgresConfiguration(url: try url(arguments)), maxConnections: 2)
        defer { pool.close() }
        do {
            return try await body(pool)
        } catch let error as PostgresError {
            throw failure(error)
        }
    }

    static func failure(_ error: PostgresError) -> CommandFailure {
        switch error.kind {
        case .connectionFailed, .connectionLost, .poolClosed, .checkoutTimeout:
            CommandFailure("cannot reach the database: \(error.message)", exitCode: .unavailable, code: "database_unavailable")
        default:
            CommandFailure("database error: \(error)", exitCode: .failure, code: "database_error")
        }
    }
}
