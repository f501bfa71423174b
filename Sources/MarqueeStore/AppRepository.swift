// Apps in the apps table: one row per bundle id and APNs environment. The signing key stays in its file;
// only the path is stored.
import Foundation
import Postgres

/// One app as stored.
public struct StoredApp: Sendable, Equatable {
    public let id: Int
    public let bundleID: String
    /// `development` or `production`.
    public let environment: String
    public let teamID: String
    public let keyID: String
    /// Where the .p8 signing key lives; the key itself is never stored.
    public let keyPath: String
    /// Overrides of Apple's hosts (e.g. the APNs simulator); nil means Apple's.
    public let pushURL: String?
    public let managementURL: String?
    public let createdAt: Date
}

/// What `app add` stores.
public struct NewApp: Sendable {
    public var bundleID: String
    public var environment: String
    public var teamID: String
    public var keyID: String
    public var keyPath: String
    public var pushURL: String?
    public var managementURL: String?

    public init(
        bundleID: String, environment: String, teamID: String, keyID: String, keyPath: String,
        pushURL: String? = nil, managementURL: String? = nil
    ) {
        self.bundleID = bundleID
        self.environment = environment
        self.teamID = teamID
        self.keyID = keyID
        self.keyPath = keyPath
        self.pushURL = pushURL
        self.managementURL = managementURL
    }
}

/// Reads and writes apps.
public struct AppRepository: Sendable {
    private let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    private static let columns: PostgresQuery =
        "id, bundle_id, environment, team_id, key_id, key_path, push_url, management_url, created_at"

    /// Stores an app. Throws a PostgresError with `uniqueViolation` when the bundle and environment exist.
    public func add(_ app: NewApp) async throws -> StoredApp {
        let rows = try await pool.query(
            """
            INSERT INTO apps (bundle_id, environment, team_id, key_id, key_path, push_url, management_url)
            VALUES (\(app.bundleID), \(app.environment), \(app.teamID), \(app.keyID), \(app.keyPath),
                    \(app.pushURL), \(app.managementURL))
            RETURNING \(fragment: Self.columns)
            """)
        return try Self.decode(rows[0])
    }

    /// Every app, by id.
    public func list() async throws -> [StoredApp] {
        try await pool.query("SELECT \(fragment: Self.columns) FROM apps ORDER BY id").map(Self.decode)
    }

    /// One app by id.
    public func find(id: Int) async throws -> StoredApp? {
        try await pool.query("SELECT \(fragment: Self.columns) FROM apps WHERE id = \(id)").first.map(Self.decode)
    }

    /// The apps of a bundle id (one per environment).
    public func find(bundleID: String) async throws -> [StoredApp] {
        try await pool.query("SELECT \(fragment: Self.columns) FROM apps WHERE bundle_id = \(bundleID) ORDER BY id")
            .map(Self.decode)
    }

    /// Removes an app and everything of it, in one transaction: by cascade, and explicitly the idempotency keys
    /// of its API keys, its deliveries, its events' outbox rows and its push-to-starts (their tables keep no
    /// foreign key to what they belong to: Sql/0011, Sql/0012, Sql/0032, Sql/0040).
    /// Returns the removed row.
    public func remove(id: Int) async throws -> StoredApp? {
        try await pool.withTransaction { tx in
            try await tx.execute(
                """
                DELETE FROM idempotency_keys WHERE api_key_id IN (SELECT id FROM api_keys WHERE app_id = \(id))
                """)
            try await tx.execute("DELETE FROM deliveries WHERE app_id = \(id)")
            try await tx.execute("DELETE FROM outbox WHERE event_id IN (SELECT id FROM events WHERE app_id = \(id))")
            try await tx.execute("DELETE FROM start_windows WHERE event_id IN (SELECT id FROM events WHERE app_id = \(id))")
            try await tx.execute("DELETE FROM starts WHERE app_id = \(id)")
            return try await tx.query("DELETE FROM apps WHERE id = \(id) RETURNING \(fragment: Self.columns)").first.map(Self.decode)
        }
    }

    private static func decode(_ row: PostgresRow) throws -> StoredApp {
        StoredApp(
            id: try row.decode(Int.self, column: "id"),
            bundleID: try row.decode(String.self, column: "bundle_id"),
            environment: try row.decode(String.self, column: "environment"),
            teamID: try row.decode(String.self, column: "team_id"),
            keyID: try row.decode(String.self, column: "key_id"),
            keyPath: try row.decode(String.self, column: "key_path"),
            pushURL: try row.decode(String?.self, column: "push_url"),
            managementURL: try row.decode(String?.self, column: "management_url"),
            createdAt: try row.decode(Date.self, column: "created_at"))
    }
}
