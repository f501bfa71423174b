import Foundation
import Postgres
import Testing

/// Restarts a cluster of its own, so other tests never see the restart.
@Suite(.enabled(if: TestDatabase.available))
struct ReconnectTests {
    @Test func poolConnectionsAndListenerSurviveAServerRestart() async throws {
        try await PrivateCluster.with { cluster in try await Self.survivesRestart(cluster) }
    }

    static func survivesRestart(_ cluster: PrivateCluster) async throws {
        let configuration = PostgresConfiguration(url: cluster.url)
        let direct = try await PostgresConnection.connect(configuration)
        let pool = PostgresPool(configuration: configuration, maxConnections: 1)
        let retryingPool = PostgresPool(configuration: configuration, maxConnections: 1)
        defer { pool.close(); retryingPool.close() }
        let listener = PostgresListener(configuration: configuration, channels: ["wake"],
                                        reconnectDelay: .milliseconds(50))
        defer { listener.stop() }
        var events = listener.events.makeAsyncIterator()
        #expect(await events.next() == .listening)
        let before = try await pool.withConnection { try await $0.query("SELECT 1 AS n"); return $0.backendPID }
        try await retryingPool.query("SELECT 1")

        try await cluster.restart()

        // A connection that died fails with a retryable connection-lost error...
        let lost = try await #require(throws: PostgresError.self) { try await direct.query("SELECT 1") }
        #expect(lost.kind == .connectionLost)
        #expect(lost.isRetryable)
        #expect(direct.isBroken)
        // ...inside a pool too, and the next checkout gets a new connection that works.
        let pooled = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { try await $0.query("SELECT 1") }
        }
        #expect(pooled.kind == .connectionLost)
        let after = try await pool.withConnection { connection in
            try await connection.query("SELECT 1 AS n")[0].decode(Int.self, column: "n") == 1 ? connection.backendPID : 0
        }
        #expect(after != 0 && after != before)
        // pool.query retries a statement that never reached the server.
        #expect(try await retryingPool.query("SELECT 2 AS n")[0].decode(Int.self, column: "n") == 2)

        // The listener reconnects and LISTENs again.
        #expect(await events.next() == .listening)
        try await pool.query("NOTIFY wake, 'after restart'")
        let event = await events.next()
        guard case .notification(let notification) = event else {
            Issue.record("expected a notification, got \(String(describing: event))")
            return
        }
        #expect(notification.payload == "after restart")
    }
}
