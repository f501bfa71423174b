// Migrations are the numbered files in Sql/, embedded at build time by the EmbedMigrations plugin
// (`embeddedMigrations`), so Sql/ stays the one source of truth and the binary is self-contained.
import Foundation

/// One numbered migration file, e.g. `0002_push_to_start.sql`.
public struct Migration: Sendable, Equatable {
    /// The first-line marker of a file that must run outside a transaction (`CREATE INDEX CONCURRENTLY`).
    /// Such a file's statements run one by one, each committed on its own; write them so a re-run after
    /// a failure is harmless (`IF NOT EXISTS`), because the file is recorded only once all succeeded.
    public static let noTransactionMarker = "-- marquee:no-transaction"

    /// The file name, `NNNN_name.sql`; the order of migrations is the order of their names.
    public let name: String
    /// The file's text, exactly as written (its checksum guards against later edits).
    public let sql: String

    public init(name: String, sql: String) {
        self.name = name
        self.sql = sql
    }

    /// False when the first line is the no-transaction marker.
    public var runsInTransaction: Bool {
        let firstLine = sql.prefix { $0 != "\n" && $0 != "\r\n" }
        return firstLine.trimmingCharacters(in: .whitespaces) != Self.noTransactionMarker
    }

    /// The migrations in Sql/, compiled into the binary, in order.
    public static let embedded: [Migration] =
        embeddedMigrations
        .map { Migration(name: $0.name, sql: $0.sql) }
        .sorted { $0.name < $1.name }

    /// True for `NNNN_lowercase_name.sql`.
    var hasValidName: Bool {
        name.range(of: #"^[0-9]{4}_[a-z0-9_]+\.sql$"#, options: .regularExpression) != nil
    }
}

/// Why migrations cannot run or the schema cannot be used.
public enum MigrationError: Error, Sendable, CustomStringConvertible {
    /// A migration that was already applied has been edited since (its checksum differs).
    /// Landed files are never edited: restore the file and add a new migration instead.
    case editedMigration(name: String, appliedChecksum: String, fileChecksum: String)
    /// A file name is not `NNNN_name.sql`, or two files share a number.
    case invalidName(String)
    /// A migration failed; nothing of it was recorded (a transactional one was rolled back).
    case failed(name: String, underlying: Error)
    /// The database lacks migrations this binary needs (`serve --no-migrate` refuses to start).
    case pending([String])

    public var description: String {
        switch self {
        case .editedMigration(let name, let applied, let file):
            "migration \(name) was edited after it was applied (applied checksum \(applied.prefix(12))…, file \(file.prefix(12))…); restore the file and add a new migration instead"
        case .invalidName(let name):
            "migration file \(name) must be named NNNN_name.sql with a unique number"
        case .failed(let name, let underlying):
            "migration \(name) failed and was not recorded: \(underlying)"
        case .pending(let names):
            "the database schema is behind: \(names.count) migration(s) pending (\(names.joined(separator: ", "))); run `marquee migrate`"
        }
    }
}
