// The one way tests get a database: a fresh, empty one per test on the test cluster that Scripts/test starts
// (MARQUEE_TEST_DATABASE_URL). A test that needs a cluster of its own (to restart it) uses Scripts/pg directly.
import Foundation
import Postgres

/// Fresh, empty databases on the shared test cluster (MARQUEE_TEST_DATABASE_URL, set by Scripts/test).
public enum TestDatabase {
    /// The test cluster's URL, if the run has one.
    public static let url = ProcessInfo.processInfo.environment["MARQUEE_TEST_DATABASE_URL"]
    /// Whether database tests can run (gate suites with `.enabled(if: TestDatabase.available)`).
    public static let available = url != nil

    /// The shared test database itself, for tests that need no isolation.
    public static var shared: PostgresConfiguration { PostgresConfiguration(url: url!) }

    /// Creates an empty database with a unique name (`prefix` says which tests made it) and returns its configuration.
    public static func fresh(_ prefix: String = "test") async throws -> PostgresConfiguration {
        try await shared.database(create(prefix))
    }

    /// The same as `fresh`, as a URL: for processes (`serve`, the CLI) that take a database URL.
    public static func freshURL(_ prefix: String = "test") async throws -> String {
        let name = try await create(prefix)
        var components = URLComponents(string: url!)!
        components.path = "/" + name
        return components.string!
    }

    private static func create(_ prefix: String) async throws -> String {
        let name = prefix + "_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let admin = try await PostgresConnection.connect(shared)
        try await admin.executeScript("CREATE DATABASE \(identifier: name)")
        return name
    }
}

/// The repository's checkout, for tests that read its files (Sql/, docs/, Scripts/).
public enum RepositoryCheckout {
    public static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}
