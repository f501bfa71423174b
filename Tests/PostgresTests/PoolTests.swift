import Foundation
import MarqueeTestSupport
import Postgres
import Synchronization
import Testing

@Suite(.enabled(if: TestDatabase.available))
struct PoolTests {
    @Test func tenConnectionsServeFiftyTasks() async throws {
        let pool = PostgresPool(configuration: TestDatabase.shared, maxConnections: 10)
        defer { pool.close() }
        let inUse = Shared((now: 0, peak: 0))
        let pids = Shared(Set<Int32>())
        let finished = try await withThrowingTaskGroup(of: Int.self) { group in
            for task in 0..<50 {
                group.addTask {
                    try await pool.withConnection { connection in
                        inUse.withLock {
                            $0.now += 1
                            $0.peak = max($0.peak, $0.now)
                        }
                        defer { inUse.withLock { $0.now -= 1 } }
                        pids.withLock { _ = $0.insert(connection.backendPID) }
                        // Work that holds its connection a while, so tasks overlap: the behaviour under test.
                        let row = try await connection.query("SELECT \(task) AS task, pg_sleep(0.02)")[0]
                        return try row.decode(Int.self, column: "task")
                    }
                }
            }
            var seen: [Int] = []
            for try await task in group { seen.append(task) }
            return seen.sorted()
        }
        #expect(finished == Array(0..<50))
        #expect(inUse.withLock { $0.peak } <= 10)
        #expect(inUse.withLock { $0.peak } > 1)
        #expect(pids.withLock { $0.count } <= 10)
        #expect(pool.statistics.open <= 10)
        // The server agrees: at most 10 sessions belonged to this pool.
        let active = try await pool.query(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE pid = ANY(\(pids.withLock { $0.map(String.init) }.sorted())::int[])")
        #expect(try active[0].decode(Int.self, column: "n") <= 10)
    }

    struct Abort: Error {}

    @Test func aTransactionLeftOpenIsRolledBackBeforeReuse() async throws {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 1)
        defer { pool.close() }
        try await pool.execute("CREATE TABLE items (id int)")
        await #expect(throws: Abort.self) {
            try await pool.withConnection { connection in
                try await connection.executeScript("BEGIN")
                try await connection.execute("INSERT INTO items VALUES (\(Int32(1)))")
                #expect(connection.isInTransaction)
                throw Abort()
            }
        }
        let leftOpen = try await pool.withConnection { connection in
            try await connection.executeScript("BEGIN")
            try await connection.execute("INSERT INTO items VALUES (\(Int32(2)))")
            return connection.backendPID
        }
        let (count, pid, inTransaction) = try await pool.withConnection { connection in
            let count = try await connection.query("SELECT count(*) AS n FROM items")[0].decode(Int.self, column: "n")
            return (count, connection.backendPID, connection.isInTransaction)
        }
        #expect(count == 0)
        #expect(pid == leftOpen)  // the same session, reused after its rollback
        #expect(!inTransaction)
    }

    @Test func closedPoolRefusesWork() async throws {
        let pool = PostgresPool(configuration: TestDatabase.shared, maxConnections: 1)
        pool.close()
        let error = try await #require(throws: PostgresError.self) { try await pool.query("SELECT 1") }
        #expect(error.kind == .poolClosed)
    }

    @Test func unreachableServerFailsTheWaiterInsteadOfHanging() async throws {
        let pool = PostgresPool(
            configuration: PostgresConfiguration(url: "postgresql://x@127.0.0.1:1/x?connect_timeout=2"),
            maxConnections: 2)
        defer { pool.close() }
        let error = try await #require(throws: PostgresError.self) { try await pool.query("SELECT 1") }
        #expect(error.kind == .connectionFailed)
        #expect(pool.statistics.open == 0)
    }

    @Test func aCheckoutWaitsNoLongerThanItsDeadline() async throws {
        let pool = PostgresPool(configuration: TestDatabase.shared, maxConnections: 1, checkoutTimeout: .milliseconds(300))
        defer { pool.close() }
        let holding = AsyncStream.makeStream(of: Void.self)
        let release = AsyncStream.makeStream(of: Void.self)
        let holder = Task {
            // Opening the first connection can take longer than the deadline on a loaded machine: try again then.
            while true {
                do {
                    return try await pool.withConnection { _ in
                        holding.continuation.yield()
                        for await _ in release.stream { break }
                    }
                } catch let error as PostgresError where error.kind == .checkoutTimeout {
                    continue
                }
            }
        }
        for await _ in holding.stream { break }
        let error = try await #require(throws: PostgresError.self) { try await pool.query("SELECT 1") }
        #expect(error.kind == .checkoutTimeout)
        #expect(error.isRetryable)
        #expect(pool.load.waiting == 0)
        release.continuation.yield()
        try await holder.value
        #expect(try await pool.query("SELECT 1 AS n")[0].decode(Int.self, column: "n") == 1)  // the pool serves again
    }

    @Test func cancelledWaiterLeavesTheQueue() async throws {
        let pool = PostgresPool(configuration: TestDatabase.shared, maxConnections: 1)
        defer { pool.close() }
        let holding = AsyncStream.makeStream(of: Void.self)
        let release = AsyncStream.makeStream(of: Void.self)
        let holder = Task {
            try await pool.withConnection { _ in
                holding.continuation.yield()
                for await _ in release.stream { break }
            }
        }
        for await _ in holding.stream { break }
        let waiter = Task { try await pool.query("SELECT 1") }
        try #require(try await eventually(every: .milliseconds(5)) { pool.statistics.waiting > 0 })
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
        // Cancelled before or while it starts waiting: either way it does not wait for the holder.
        for _ in 0..<20 {
            let early = Task { try await pool.query("SELECT 1") }
            early.cancel()
            await #expect(throws: CancellationError.self) { try await early.value }
        }
        #expect(pool.statistics.waiting == 0)
        release.continuation.yield()
        try await holder.value
        #expect(try await pool.query("SELECT 2 AS n")[0].decode(Int.self, column: "n") == 2)
    }
}

/// A Mutex in a class, so concurrently running closures can share it.
final class Shared<Value: Sendable>: Sendable {
    private let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    func withLock<T: Sendable>(_ body: (inout Value) -> T) -> T { mutex.withLock { body(&$0) } }
}
