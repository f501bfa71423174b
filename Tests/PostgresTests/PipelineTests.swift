import Foundation
import Postgres
import Testing

/// Pipelines: statements sent in one round trip that run as one implicit transaction.
@Suite(.enabled(if: TestDatabase.available))
struct PipelineTests {
    @Test func statementsRunInOrderAndSeeEarlierWrites() async throws {
        let connection = try await PostgresConnection.connect(try await ErrorAndTransactionTests.schema())
        for round in 0..<3 {  // the first round prepares the statements, the next ones reuse them
            let results = try await connection.pipeline([
                "INSERT INTO parent VALUES (\(100 + round))",
                "INSERT INTO child VALUES (\(100 + round), \(100 + round), \(round + 1)) RETURNING id",
                "SELECT count(*) AS n FROM child WHERE parent_id = \(100 + round)",
            ])
            #expect(results.count == 3)
            #expect(results[0].affectedRows == 1)
            #expect(try results[1][0].decode(Int.self, column: "id") == 100 + round)
            #expect(try results[2][0].decode(Int.self, column: "n") == 1)
        }
        #expect(try await connection.pipeline([]).isEmpty)
    }

    @Test func anErrorUndoesEveryStatementAndTheConnectionStaysUsable() async throws {
        let connection = try await PostgresConnection.connect(try await ErrorAndTransactionTests.schema())
        // The third statement breaks a constraint: the first two are rolled back with it.
        let error = try await #require(throws: PostgresError.self) {
            try await connection.pipeline([
                "INSERT INTO parent VALUES (\(20))",
                "INSERT INTO child VALUES (\(20), \(20), \(5))",
                "INSERT INTO child VALUES (\(21), \(20), \(-1))",
                "INSERT INTO parent VALUES (\(21))",
            ])
        }
        #expect(error.sqlState == .checkViolation)
        #expect(!connection.isInTransaction)
        #expect(try await connection.query("SELECT count(*) AS n FROM parent WHERE id >= 20")[0].decode(Int.self, column: "n") == 0)
        // A statement that fails to prepare (syntax) does not poison the session's prepared statements.
        await #expect(throws: PostgresError.self) {
            try await connection.pipeline(["INSERT INTO parent VALUES (\(22))", "SELEC 1"])
        }
        let rows = try await connection.pipeline(["INSERT INTO parent VALUES (\(22))", "SELECT count(*) AS n FROM parent WHERE id = 22"])
        #expect(try rows[1][0].decode(Int.self, column: "n") == 1)
    }

    @Test func insideATransactionBlockItIsPartOfIt() async throws {
        let pool = PostgresPool(configuration: try await ErrorAndTransactionTests.schema(), maxConnections: 2)
        defer { pool.close() }
        struct Abort: Error {}
        await #expect(throws: Abort.self) {
            try await pool.withTransaction { tx in
                try await tx.pipeline(["INSERT INTO parent VALUES (\(30))", "INSERT INTO parent VALUES (\(31))"])
                throw Abort()
            }
        }
        #expect(try await pool.query("SELECT count(*) AS n FROM parent WHERE id >= 30")[0].decode(Int.self, column: "n") == 0)
        try await pool.pipeline(["INSERT INTO parent VALUES (\(30))", "INSERT INTO parent VALUES (\(31))"])
        #expect(try await pool.query("SELECT count(*) AS n FROM parent WHERE id >= 30")[0].decode(Int.self, column: "n") == 2)
    }
}
