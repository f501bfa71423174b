import Foundation
import MarqueeCore
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// The key, app and attribute-type repositories on a migrated database.
@Suite(.enabled(if: TestDatabase.available))
struct RepositoryTests {
    static func migratedPool() async throws -> PostgresPool {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 2)
        try await MigrationRunner(pool: pool).migrate()
        return pool
    }

    static let app = NewApp(
        bundleID: "com.example.scores", environment: "development", teamID: "ABCDE12345",
        keyID: "KEY1234567", keyPath: "/keys/AuthKey.p8")

    @Test func apiKeysAreFoundByIdAndRevokedOnce() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let keys = APIKeyRepository(pool: pool)
        let salt = [UInt8](repeating: 7, count: 16)
        let hash = [UInt8](repeating: 9, count: 32)
        let created = try await keys.create(keyID: "0123456789ab", name: "feed", scopes: ["ingest", "tokens"], salt: salt, hash: hash)
        #expect(created.scopes == ["ingest", "tokens"] && created.salt == salt && created.hash == hash && !created.isRevoked)
        #expect(try await keys.find(keyID: "0123456789ab") == created)
        #expect(try await keys.find(keyID: "ffffffffffff") == nil)
        let first = try #require(try await keys.revoke(keyID: "0123456789ab")?.revokedAt)
        let second = try #require(try await keys.revoke(keyID: "0123456789ab")?.revokedAt)
        #expect(first == second)
        #expect(try await keys.revoke(keyID: "ffffffffffff") == nil)
        #expect(try await keys.list(includeRevoked: false).isEmpty)
        #expect(try await keys.list().count == 1)
        await #expect(throws: PostgresError.self) {
            try await keys.create(keyID: "0123456789ab", name: "again", scopes: ["admin"], salt: salt, hash: hash)
        }
    }

    @Test func appsAreUniquePerBundleAndEnvironment() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let apps = AppRepository(pool: pool)
        let added = try await apps.add(Self.app)
        #expect(try await apps.find(id: added.id) == added)
        var production = Self.app
        production.environment = "production"
        production.pushURL = "https://127.0.0.1:2197"
        _ = try await apps.add(production)
        #expect(try await apps.find(bundleID: "com.example.scores").map(\.environment) == ["development", "production"])
        do {
            _ = try await apps.add(Self.app)
            Issue.record("a second development app for the bundle was stored")
        } catch let error as PostgresError {
            #expect(error.sqlState == .uniqueViolation)
        }
        #expect(try await apps.remove(id: added.id)?.id == added.id)
        #expect(try await apps.remove(id: added.id) == nil)
        #expect(try await apps.list().count == 1)
    }

    @Test func attributeTypesRegisterOnceKeepFieldOrderAndConflict() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let appID = try await AppRepository(pool: pool).add(Self.app).id
        let types = AttributeTypeRepository(pool: pool)
        let type = try ActivityType(
            jsonText: """
                {"name": "MatchAttributes", "attributes": {"zeta": "string", "alpha": "int"},
                 "contentState": {"score": "int", "minute": "int", "away": "string?"}}
                """)
        guard case .created(let stored) = try await types.register(type, appID: appID) else {
            Issue.record("expected created")
            return
        }
        #expect(stored.type == type)
        #expect(try await types.register(type, appID: appID) == .unchanged(stored))
        var other = type
        other.contentState = try ObjectSchema(json: ["score": "double"])
        #expect(try await types.register(other, appID: appID) == .conflict(existing: stored))
        let found = try #require(try await types.find(name: "MatchAttributes", appID: appID))
        #expect(found.type.contentState.fields.map(\.name) == ["score", "minute", "away"])
        #expect(found.type.attributes.fields.map(\.name) == ["zeta", "alpha"])
        #expect(try await types.list(appID: appID).count == 1)
        #expect(try await types.list(appID: appID + 1).isEmpty)
    }

    @Test func rowsWithoutADocumentAreReadFromTheJSONBColumns() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let appID = try await AppRepository(pool: pool).add(Self.app).id
        try await pool.execute(
            """
            INSERT INTO attribute_types (app_id, name, attributes_schema, content_state_schema)
            VALUES (\(appID), 'Legacy', \(PostgresJSON(#"{"team": "string"}"#)), \(PostgresJSON(#"{"score": "int"}"#)))
            """)
        let legacy = try #require(try await AttributeTypeRepository(pool: pool).find(name: "Legacy", appID: appID))
        #expect(legacy.type.contentState.fields.map(\.name) == ["score"])
        #expect(legacy.type.attributes.field(named: "team")?.spec == FieldSpec(.string))
    }
}
