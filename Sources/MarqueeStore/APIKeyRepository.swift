// API keys in the api_keys table. The secret never reaches this file: the caller hashes it (MarqueeService's
// APIKey.swift) and passes the salt and hash; lookups return them for a constant-time comparison there.
import Foundation
import Postgres

/// One stored API key, without any secret (the salt and hash are not secrets on their own).
public struct StoredAPIKey: Sendable, Equatable {
    public let id: Int
    /// The public 12-hex key id, the `<id>` in `mq_<id>_<secret>`.
    public let keyID: String
    public let name: String
    /// Scope names (`ingest`, `tokens`, `admin`).
    public let scopes: [String]
    /// NULL: the key works for every app.
    public let appID: Int?
    public let salt: [UInt8]
    public let hash: [UInt8]
    public let createdAt: Date
    public let revokedAt: Date?
    public let lastUsedAt: Date?

    public var isRevoked: Bool { revokedAt != nil }
}

/// Reads and writes API keys.
public struct APIKeyRepository: Sendable {
    private let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    private static let columns: PostgresQuery = "id, prefix, name, scopes, app_id, salt, hash, created_at, revoked_at, last_used_at"

    /// Stores a new key; returns the stored row.
    public func create(keyID: String, name: String, scopes: [String], salt: [UInt8], hash: [UInt8], appID: Int? = nil) async throws -> StoredAPIKey {
        let rows = try await pool.query(
            """
            INSERT INTO api_keys (prefix, name, scopes, salt, hash, app_id)
            VALUES (\(keyID), \(name), \(scopes), \(Data(salt)), \(Data(hash)), \(appID))
            RETURNING \(fragment: Self.columns)
            """)
        return try Self.decode(rows[0])
    }

    /// The key with this public id (revoked or not), if any.
    public func find(keyID: String) async throws -> StoredAPIKey? {
        let rows = try await pool.query("SELECT \(fragment: Self.columns) FROM api_keys WHERE prefix = \(keyID)")
        return try rows.first.map(Self.decode)
    }

    /// Every key, oldest first.
    public func list(includeRevoked: Bool = true) async throws -> [StoredAPIKey] {
        try await pool.query(
            """
            SELECT \(fragment: Self.columns) FROM api_keys WHERE \(includeRevoked) OR revoked_at IS NULL ORDER BY id
            """
        ).map(Self.decode)
    }

    /// Revokes a key by its public id; returns false when no such key exists. Revoking twice keeps the first time.
    public func revoke(keyID: String) async throws -> StoredAPIKey? {
        let rows = try await pool.query(
            """
            UPDATE api_keys SET revoked_at = COALESCE(revoked_at, greatest(now(), created_at))
            WHERE prefix = \(keyID) RETURNING \(fragment: Self.columns)
            """)
        return try rows.first.map(Self.decode)
    }

    /// Records that a key was used (called at most once per cache period per key).
    public func touch(keyID: String) async throws {
        try await pool.execute("UPDATE api_keys SET last_used_at = now() WHERE prefix = \(keyID)")
    }

    private static func decode(_ row: PostgresRow) throws -> StoredAPIKey {
        StoredAPIKey(
            id: try row.decode(Int.self, column: "id"),
            keyID: try row.decode(String.self, column: "prefix"),
            name: try row.decode(String.self, column: "name"),
            scopes: try row.decode([String].self, column: "scopes"),
            appID: try row.decode(Int?.self, column: "app_id"),
            salt: [UInt8](try row.decode(Data.self, column: "salt")),
            hash: [UInt8](try row.decode(Data.self, column: "hash")),
            createdAt: try row.decode(Date.self, column: "created_at"),
            revokedAt: try row.decode(Date?.self, column: "revoked_at"),
            lastUsedAt: try row.decode(Date?.self, column: "last_used_at"))
    }
}
