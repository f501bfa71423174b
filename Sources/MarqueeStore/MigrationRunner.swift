// Applies Sql/ migrations in order, once each, from any number of instances starting at once.
// Mutual exclusion is a session-level advisory lock taken by polling pg_try_advisory_lock: a session
// blocked inside pg_advisory_lock holds a snapshot, and CREATE INDEX CONCURRENTLY in the winner's
// migration would wait on it forever. Each applied file is recorded with its SHA-256 (computed by
// PostgreSQL: MarqueeStore has no crypto of its own), and an edited landed file stops the runner.
import Foundation
import Postgres

/// Applies pending migrations and reports whether the schema is current.
public struct MigrationRunner: Sendable {
    /// The advisory lock key all Marquee instances share ("marquee" in ASCII, then 0x01).
    public static let lockKey: Int64 = 0x6D61_7271_7565_6501

    private let pool: PostgresPool
    private let migrations: [Migration]
    private let pollInterval: Duration

    /// A runner for `migrations` (the embedded Sql/ files unless given, e.g. by tests).
    public init(
        pool: PostgresPool, migrations: [Migration] = Migration.embedded,
        pollInterval: Duration = .milliseconds(100)
    ) {
        self.pool = pool
        self.migrations = migrations.sorted { $0.name < $1.name }
        self.pollInterval = pollInterval
    }

    /// Applies every pending migration, in order, and returns the names it applied (empty when the
    /// schema was current). Waits while another instance migrates. Throws before applying anything
    /// when an applied file was edited.
    @discardableResult
    public func migrate() async throws -> [String] {
        try validateNames()
        return try await pool.withConnection { connection in
            try await acquireLock(connection)
            do {
                let applied = try await run(on: connection)
                try await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))")
                return applied
            } catch {
                if !connection.isBroken { _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))") }
                throw error
            }
        }
    }

    /// The names of migrations not yet applied. Throws `editedMigration` when an applied one changed.
    public func pendingMigrations() async throws -> [String] {
        try validateNames()
        return try await pool.withConnection { connection in
            let exists = try await connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL AS present")[0]
            guard try exists.decode(Bool.self, column: "present") else { return migrations.map(\.name) }
            return try await pending(on: connection).map(\.migration.name)
        }
    }

    /// Throws `MigrationError.pending` unless the schema is current (for `serve --no-migrate`).
    public func requireCurrentSchema() async throws {
        let pending = try await pendingMigrations()
        if !pending.isEmpty { throw MigrationError.pending(pending) }
    }

    // MARK: Steps

    private func validateNames() throws {
        var numbers = Set<Substring>()
        for migration in migrations {
            guard migration.hasValidName, numbers.insert(migration.name.prefix(4)).inserted else {
                throw MigrationError.invalidName(migration.name)
            }
        }
    }

    private func acquireLock(_ connection: PostgresConnection) async throws {
        while true {
            let row = try await connection.query("SELECT pg_try_advisory_lock(\(Self.lockKey)) AS locked")[0]
            if try row.decode(Bool.self, column: "locked") { return }
            try await Task.sleep(for: pollInterval)
        }
    }

    /// With the lock held: create the bookkeeping table, check checksums, apply what is pending.
    private func run(on connection: PostgresConnection) async throws -> [String] {
        try await connection.executeScript(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                name        text PRIMARY KEY CHECK (name ~ '^[0-9]{4}_[a-z0-9_]+\\.sql$'),
                checksum    text NOT NULL CHECK (checksum ~ '^[0-9a-f]{64}$'),
                applied_at  timestamptz NOT NULL DEFAULT now()
            )
            """)
        var applied: [String] = []
        for (migration, checksum) in try await pending(on: connection) {
            do {
                try await apply(migration, checksum: checksum, on: connection)
            } catch {
                throw MigrationError.failed(name: migration.name, underlying: error)
            }
            applied.append(migration.name)
        }
        return applied
    }

    /// The migrations without a schema_migrations row, with their checksums; throws on an edited one.
    private func pending(on connection: PostgresConnection) async throws -> [(migration: Migration, checksum: String)] {
        let checksums = try await connection.query(
            """
            SELECT encode(sha256(convert_to(sql, 'UTF8')), 'hex') AS checksum
            FROM unnest(\(migrations.map(\.sql))::text[]) WITH ORDINALITY AS file (sql, position)
            ORDER BY position
            """
        ).map { try $0.decode(String.self, column: "checksum") }
        var recorded: [String: String] = [:]
        for row in try await connection.query("SELECT name, checksum FROM schema_migrations") {
            recorded[try row.decode(String.self, column: "name")] = try row.decode(String.self, column: "checksum")
        }
        var pending: [(Migration, String)] = []
        for (migration, checksum) in zip(migrations, checksums) {
            if let appliedChecksum = recorded[migration.name] {
                guard appliedChecksum == checksum else {
                    throw MigrationError.editedMigration(
                        name: migration.name, appliedChecksum: appliedChecksum,
                        fileChecksum: checksum)
                }
            } else {
                pending.append((migration, checksum))
            }
        }
        return pending
    }

    private func apply(_ migration: Migration, checksum: String, on connection: PostgresConnection) async throws {
        let record: PostgresQuery = "INSERT INTO schema_migrations (name, checksum) VALUES (\(migration.name), \(checksum))"
        if migration.runsInTransaction {
            try await connection.withTransaction { transaction in
                try await transaction.executeScript(PostgresQuery(unsafeSQL: migration.sql))
                try await transaction.execute(record)
            }
        } else {
            // Several statements in one simple query form an implicit transaction block, which
            // CREATE INDEX CONCURRENTLY refuses: send them one at a time.
            for statement in SQLStatementSplitter.split(migration.sql) {
                try await connection.executeScript(PostgresQuery(unsafeSQL: statement))
            }
            try await connection.execute(record)
        }
    }
}
