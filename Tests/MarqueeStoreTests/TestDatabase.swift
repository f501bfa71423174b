import Foundation
import Postgres

/// A fresh, empty database per test on the test cluster (MARQUEE_TEST_DATABASE_URL, set by Scripts/test).
enum TestDatabase {
    static let url = ProcessInfo.processInfo.environment["MARQUEE_TEST_DATABASE_URL"]
    static let available = url != nil

    static func fresh() async throws -> PostgresConfiguration {
        let shared = PostgresConfiguration(url: url!)
        let name = "store_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let admin = try await PostgresConnection.connect(shared)
        try await admin.executeScript("CREATE DATABASE \(identifier: name)")
        return shared.database(name)
    }

    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}
