// What the pipeline services look up outside the pipeline tables: an app's bundle id (to address
// APNs) and an attribute type's content-state schema (its `significant` fields decide priority under
// `auto`). Both are immutable once written, so the PostgreSQL reader caches them for the life of the
// process: a claim carries its event's attribute type, so a thousand events of one type cost one query.
import Foundation
import MarqueeCore
import Postgres
import Synchronization

/// Apps and content-state schemas, as the dispatcher and the scheduler need them.
public protocol PipelineCatalog: Sendable {
    /// The app with this id, or nil.
    func app(id: Int) async throws -> PipelineApp?
    /// Every app (the scheduler reconciles each one's channel list).
    func apps() async throws -> [PipelineApp]
    /// The content-state schema of an attribute type, or nil when unknown.
    func contentStateSchema(attributeTypeID: Int) async throws -> ObjectSchema?
}

/// Reads apps and schemas from the `apps` and `attribute_types` tables, caching what it read.
public final class PostgresPipelineCatalog: PipelineCatalog {
    private let pool: PostgresPool
    private let cache = Mutex<(apps: [Int: PipelineApp], schemas: [Int: ObjectSchema])>(([:], [:]))

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    public func app(id: Int) async throws -> PipelineApp? {
        if let app = cache.withLock({ $0.apps[id] }) { return app }
        guard let row = try await pool.query("SELECT id, bundle_id, environment FROM apps WHERE id = \(id)").first else { return nil }
        let app = PipelineApp(
            id: try row.decode(Int.self, column: "id"), bundleID: try row.decode(String.self, column: "bundle_id"),
            environment: try row.decode(String.self, column: "environment"))
        cache.withLock { $0.apps[id] = app }
        return app
    }

    public func apps() async throws -> [PipelineApp] {
        let apps = try await pool.query("SELECT id, bundle_id, environment FROM apps ORDER BY id").map { row in
            PipelineApp(
                id: try row.decode(Int.self, column: "id"), bundleID: try row.decode(String.self, column: "bundle_id"),
                environment: try row.decode(String.self, column: "environment"))
        }
        cache.withLock { cache in for app in apps { cache.apps[app.id] = app } }
        return apps
    }

    public func contentStateSchema(attributeTypeID: Int) async throws -> ObjectSchema? {
        if let cached = cache.withLock({ $0.schemas[attributeTypeID] }) { return cached }
        guard
            let row = try await pool.query(
                """
                SELECT content_state_schema FROM attribute_types WHERE id = \(attributeTypeID)
                """
            ).first
        else { return nil }
        // Field order does not matter for significance, so the jsonb column serves (it sorts keys).
        let json = try JSONValue(parsing: try row.decode(PostgresJSON.self, column: "content_state_schema").text)
        let schema = try ObjectSchema(json: json)
        cache.withLock { $0.schemas[attributeTypeID] = schema }
        return schema
    }
}
