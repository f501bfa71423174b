// Attribute types in the attribute_types table: the schema of an app's ActivityAttributes type. A type
// is registered once; the same document again is a no-op, a different one under the same name is a
// conflict (devices already decode the old shape: a new shape needs a new Swift type name).
import Foundation
import MarqueeCore
import Postgres

/// One stored attribute type.
public struct StoredAttributeType: Sendable, Equatable {
    public let id: Int
    public let appID: Int
    public let type: ActivityType
    public let createdAt: Date
}

/// The outcome of registering an attribute type.
public enum AttributeTypeRegistration: Sendable, Equatable {
    case created(StoredAttributeType)
    /// The same document was already registered.
    case unchanged(StoredAttributeType)
    /// Another document is registered under the name.
    case conflict(existing: StoredAttributeType)
}

/// Reads and writes attribute types.
public struct AttributeTypeRepository: Sendable {
    private let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    private static let columns: PostgresQuery =
        "id, app_id, name, attributes_schema, content_state_schema, document, created_at"

    /// Registers `type` for an app, in one statement: created, unchanged or a conflict.
    public func register(_ type: ActivityType, appID: Int) async throws -> AttributeTypeRegistration {
        let document = type.json.jsonString
        let inserted = try await pool.query(
            """
            INSERT INTO attribute_types (app_id, name, attributes_schema, content_state_schema, document)
            VALUES (\(appID), \(type.name), \(PostgresJSON(type.attributes.json.jsonString)),
                    \(PostgresJSON(type.contentState.json.jsonString)), \(document))
            ON CONFLICT ON CONSTRAINT attribute_types_name_unique DO NOTHING
            RETURNING \(fragment: Self.columns)
            """)
        if let row = inserted.first { return .created(try Self.decode(row)) }
        guard let existing = try await find(name: type.name, appID: appID) else {
            // Deleted between the two statements: try once more.
            return try await register(type, appID: appID)
        }
        return existing.type == type ? .unchanged(existing) : .conflict(existing: existing)
    }

    /// The type `name` of an app.
    public func find(name: String, appID: Int) async throws -> StoredAttributeType? {
        try await pool.query("SELECT \(fragment: Self.columns) FROM attribute_types WHERE app_id = \(appID) AND name = \(name)")
            .first.map(Self.decode)
    }

    /// The type with this id.
    public func find(id: Int) async throws -> StoredAttributeType? {
        try await pool.query("SELECT \(fragment: Self.columns) FROM attribute_types WHERE id = \(id)").first.map(Self.decode)
    }

    /// The types named `name`, over all apps.
    public func find(name: String) async throws -> [StoredAttributeType] {
        try await pool.query("SELECT \(fragment: Self.columns) FROM attribute_types WHERE name = \(name) ORDER BY app_id")
            .map(Self.decode)
    }

    /// Every type, or those of one app, by app and name.
    public func list(appID: Int? = nil) async throws -> [StoredAttributeType] {
        try await pool.query(
            """
            SELECT \(fragment: Self.columns) FROM attribute_types
            WHERE \(appID)::bigint IS NULL OR app_id = \(appID) ORDER BY app_id, name
            """
        ).map(Self.decode)
    }

    private static func decode(_ row: PostgresRow) throws -> StoredAttributeType {
        let name = try row.decode(String.self, column: "name")
        let documentJSON: JSONValue
        if let document = try row.decode(String?.self, column: "document") {
            documentJSON = try JSONValue(parsing: document)
        } else {
            documentJSON = [
                "name": .string(name),
                "attributes": try JSONValue(parsing: row.decode(PostgresJSON.self, column: "attributes_schema").text),
                "contentState": try JSONValue(parsing: row.decode(PostgresJSON.self, column: "content_state_schema").text),
            ]
        }
        return StoredAttributeType(
            id: try row.decode(Int.self, column: "id"),
            appID: try row.decode(Int.self, column: "app_id"),
            type: try ActivityType(json: documentJSON),
            createdAt: try row.decode(Date.self, column: "created_at"))
    }
}
