import Foundation
import MarqueeTestSupport
import Postgres
import Testing

/// Restarts a cluster of its own, so other tests never see the restart.
@Suite(.enabled(if: TestDatabase.available))
struct ReconnectTests {
    @Test func poolConnectionsAndListenerSurviveAServerRestart() async throws {
        try await ScratchCluster.with { cluster in try await Self.survivesRestart(cluster) }
    }

    static func survivesRestart(_ cluster: ScratchCluster) async throws {
        let configuration = PostgresConfiguration(url: cluster.url)
        let direct = try await PostgresConnection.connect(configuration)
        let pool = PostgresPool(configuration: configuration, maxConnections: 1)
        let retryingPool = PostgresPool(configuration: configuration, maxConnections: 1)
        defer {
            pool.close()
            retryingPool.close()
        }
        let listener = PostgresListener(
            configuration: configuration, channels: ["wake"],
            reconnectDelay: .milliseconds(50))
        defer { listener.stop() }
        var events = listener.events.makeAsyncIterator()
        #expect(await events.next() == .listening)
        let before = try await pool.withConnection {
            try await $0.query("SELECT 1 AS n")
            return $0.backendPID
        }
        try await retryingPool.query("SELECT 1")

        try await cluster.restart()

        // A connection that died fails with a retryable connection-lost error...
        let lost = try await #require(throws: PostgresError.self) { try await direct.query("SELECT 1") }
        #expect(lost.kind == .connectionLost)
        #expect(lost.isRetryable)
        #expect(direct.isBroken)
        // A pool notices its idle connection died before lending it, and lends a new one instead.
        let after = try await pool.withConnection { connection in
            try await connection.query("SELECT 1 AS n")[0].decode(Int.self, column: "n") == 1 ? connection.backendPID : 0
        }
        #expect(after != 0 && after != before)
        // A connection that dies while lent fails its statement with a retryable error; the pool
        // drops it and the next checkout works again.
        let dying = try await #require(throws: PostgresError.self) {
            try await pool.withConnection { connection in
                try await connection.query("SELECT pg_terminate_backend(pg_backend_pid())")
            }
        }
        #expect(dying.kind == .connectionLost)
        #expect(dying.isRetryable)
        #expect(try await pool.query("SELECT 3 AS n")[0].decode(Int.self, column: "n") == 3)
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
