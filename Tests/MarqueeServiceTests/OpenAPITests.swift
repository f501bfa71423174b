import Foundation
import MarqueeCore
import MarqueeService
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// The OpenAPI document and the route table describe the same API.
@Suite struct OpenAPITests {
    /// "METHOD /template" for every operation in the document.
    static func documentedOperations() throws -> Set<String> {
        let document = try JSONValue(parsing: OpenAPIDocument.text)
        var operations = Set<String>()
        for (path, item) in try #require(document["paths"]?.objectValue) {
            for (method, _) in try #require(item.objectValue)
            where ["get", "put", "post", "delete", "patch", "head", "options", "trace"].contains(method) {
                operations.insert("\(method.uppercased()) \(path)")
            }
        }
        return operations
    }

    @Test func documentMatchesTheRouter() throws {
        // The pool is never used: building the routes opens no connection.
        let pool = PostgresPool(configuration: PostgresConfiguration(url: "postgresql://nobody@127.0.0.1:1/none"), maxConnections: 1)
        defer { pool.close() }
        let metrics = MetricsRegistry()
        let api = APIServer(
            routes: MarqueeDaemon.testRoutes(pool: pool, metrics: metrics),
            keys: APIKeyVerifier(lookup: NoKeys()), metrics: metrics, logger: Logger { _ in })
        let routed = Set(api.routes.endpoints.map { "\($0.method) \($0.template)" })
        let documented = try Self.documentedOperations()
        #expect(routed.subtracting(documented).isEmpty, "routes missing from the OpenAPI document")
        #expect(documented.subtracting(routed).isEmpty, "documented operations the router lacks")
        #expect(routed.count == api.routes.endpoints.count, "a (method, template) pair is registered twice")
    }

    @Test func theServedDocumentIsDocsOpenAPIJSON() throws {
        // docs/openapi.json is the source, compiled in by the EmbedServedFiles plugin: the binary serves the file as it is.
        let file = try String(contentsOf: RepositoryCheckout.root.appending(path: "docs/openapi.json"), encoding: .utf8)
        #expect(file == OpenAPIDocument.text)
        let document = try JSONValue(parsing: OpenAPIDocument.text)
        #expect(document["openapi"] == "3.1.0")
    }

    struct NoKeys: APIKeyLookup {
        func key(id: String) async throws -> StoredAPIKey? { nil }
        func touch(id: String) async {}
    }
}
