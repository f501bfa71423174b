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
    /// Its freshness policy's members (`PUT /v1/attribute-types/{name}/policy`); nil: none set.
    public var freshness: FreshnessSettings?
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

    /// The columns of a type (`t`) that `decode` reads, besides its policy's `freshness`.
    private static let columns: PostgresQuery =
        "t.id, t.app_id, t.name, t.attributes_schema, t.content_state_schema, t.document, t.created_at"
    /// The stored types with their policies.
    private static let selectFrom: PostgresQuery = """
        SELECT \(fragment: columns), p.freshness
        FROM attribute_types t LEFT JOIN attribute_type_policies p ON p.attribute_type_id = t.id
        """

    /// Registers `type` for an app, in one statement: created, unchanged or a conflict.
    public func register(_ type: ActivityType, appID: Int) async throws -> AttributeTypeRegistration {
        let document = type.json.jsonString
        let inserted = try await pool.query(
            """
            INSERT INTO attribute_types AS t (app_id, name, attributes_schema, content_state_schema, document)
            VALUES (\(appID), \(type.name), \(PostgresJSON(type.attributes.json.jsonString)),
                    \(PostgresJSON(type.contentState.json.jsonString)), \(document))
            ON CONFLICT ON CONSTRAINT attribute_types_name_unique DO NOTHING
            RETURNING \(fragment: Self.columns), NULL::jsonb AS freshness -- a new type has no policy yet
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
        try await pool.query("\(fragment: Self.selectFrom) WHERE t.app_id = \(appID) AND t.name = \(name)")
            .first.map(Self.decode)
    }

    /// The type with this id.
    public func find(id: Int) async throws -> StoredAttributeType? {
        try await pool.query("\(fragment: Self.selectFrom) WHERE t.id = \(id)").first.map(Self.decode)
    }

    /// The types named `name`, over all apps.
    public func find(name: String) async throws -> [StoredAttributeType] {
        try await pool.query("\(fragment: Self.selectFrom) WHERE t.name = \(name) ORDER BY t.app_id")
            .map(Self.decode)
    }

    /// Every type, or those of one app, by app and name.
    public func list(appID: Int? = nil) async throws -> [StoredAttributeType] {
        try await pool.query(
            """
            \(fragment: Self.selectFrom)
            WHERE \(appID)::bigint IS NULL OR t.app_id = \(appID) ORDER BY t.app_id, t.name
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
            createdAt: try row.decode(Date.self, column: "created_at"),
            freshness: try row.freshnessSettings(column: "freshness"))
    }

    /// Replaces the type's freshness policy with `settings` (every member unset: no policy), recording the key
    /// that set it; returns the type as stored now.
    public func setPolicy(typeID: Int, _ settings: FreshnessSettings, apiKeyID: Int?) async throws -> StoredAttributeType? {
        if settings == FreshnessSettings() {
            try await pool.execute("DELETE FROM attribute_type_policies WHERE attribute_type_id = \(typeID)")
        } else {
            try await pool.execute(
                """
                INSERT INTO attribute_type_policies (attribute_type_id, freshness, api_key_id)
                SELECT id, \(settings.json.postgresJSON)::jsonb, \(apiKeyID) FROM attribute_types WHERE id = \(typeID)
                ON CONFLICT (attribute_type_id) DO UPDATE SET freshness = EXCLUDED.freshness, api_key_id = EXCLUDED.api_key_id,
                    updated_at = now()
                """)
        }
        return try await find(id: typeID)
    }
}
