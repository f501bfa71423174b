import Foundation
import MarqueeTestSupport
import Postgres
import Testing

@Suite(.enabled(if: TestDatabase.available))
struct ErrorAndTransactionTests {
    static func schema() async throws -> PostgresConfiguration {
        let configuration = try await TestDatabase.fresh()
        let connection = try await PostgresConnection.connect(configuration)
        try await connection.executeScript(
            """
            CREATE TABLE parent (id int PRIMARY KEY);
            CREATE TABLE child (id int PRIMARY KEY, parent_id int REFERENCES parent (id),
                                score int CONSTRAINT score_positive CHECK (score > 0));
            INSERT INTO parent VALUES (1), (2);
            """)
        return configuration
    }

    @Test func constraintViolationsAreTypedAndNotRetryable() async throws {
        let connection = try await PostgresConnection.connect(try await Self.schema())
        try await connection.execute("INSERT INTO child VALUES (\(1), \(1), \(5))")

        let unique = try await #require(throws: PostgresError.self) {
            try await connection.execute("INSERT INTO child VALUES (\(1), \(1), \(5))")
        }
        #expect(unique.sqlState == .uniqueViolation)
        #expect(unique.kind == .server)
        #expect(unique.constraint == "child_pkey")
        #expect(!unique.isRetryable)

        let foreignKey = try await #require(throws: PostgresError.self) {
            try await connection.execute("INSERT INTO child VALUES (\(2), \(99), \(5))")
        }
        #expect(foreignKey.sqlState == .foreignKeyViolation)
        #expect(foreignKey.table == "child")

        let check = try await #require(throws: PostgresError.self) {
            try await connection.execute("INSERT INTO child VALUES (\(3), \(1), \(-1))")
        }
        #expect(check.sqlState == .checkViolation)
        #expect(check.constraint == "score_positive")

        let undefined = try await #require(throws: PostgresError.self) {
            try await connection.query("SELECT * FROM no_such_table")
        }
        #expect(undefined.sqlState == .undefinedTable)

        let syntax = try await #require(throws: PostgresError.self) { try await connection.query("SELEC 1") }
        #expect(syntax.sqlState == .syntaxError)

        // The connection is still usable after errors.
        #expect(try await connection.query("SELECT 1 AS one")[0].decode(Int.self, column: "one") == 1)
        #expect(!connection.isBroken)
    }

    @Test func statementTimeoutIsQueryCanceled() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        try await connection.executeScript("SET statement_timeout TO '50ms'")
        let error = try await #require(throws: PostgresError.self) { try await connection.query("SELECT pg_sleep(5)") }
        #expect(error.sqlState == .queryCanceled)
        #expect(!error.isRetryable)
    }

    @Test func deadlockIsTypedAndRetryable() async throws {
        let configuration = try await Self.schema()
        let a = try await PostgresConnection.connect(configuration)
        let b = try await PostgresConnection.connect(configuration)
        for connection in [a, b] { try await connection.executeScript("SET deadlock_timeout TO '50ms'") }
        try await a.executeScript("BEGIN")
        try await b.executeScript("BEGIN")
        try await a.execute("UPDATE parent SET id = id WHERE id = \(1)")
        try await b.execute("UPDATE parent SET id = id WHERE id = \(2)")
        func failure(_ connection: PostgresConnection, _ id: Int) async -> PostgresError? {
            do {
                try await connection.execute("UPDATE parent SET id = id WHERE id = \(id)")
                return nil
            } catch {
                return error as? PostgresError
            }
        }
        async let first = failure(a, 2)
        async let second = failure(b, 1)
        let errors = await [first, second].compactMap { $0 }
        #expect(errors.count == 1)
        #expect(errors.first?.sqlState == .deadlockDetected)
        #expect(errors.first?.isRetryable == true)
        try await a.executeScript("ROLLBACK")
        try await b.executeScript("ROLLBACK")
    }

    @Test func serializationFailureIsRetryable() async throws {
        let configuration = try await Self.schema()
        let a = try await PostgresConnection.connect(configuration)
        let b = try await PostgresConnection.connect(configuration)
        try await a.executeScript("BEGIN ISOLATION LEVEL SERIALIZABLE")
        try await b.executeScript("BEGIN ISOLATION LEVEL SERIALIZABLE")
        // Write skew: each reads what the other writes.
        _ = try await a.query("SELECT count(*) FROM child WHERE parent_id = 1")
        _ = try await b.query("SELECT count(*) FROM child WHERE parent_id = 2")
        try await a.execute("INSERT INTO child VALUES (\(10), \(2), \(1))")
        try await b.execute("INSERT INTO child VALUES (\(11), \(1), \(1))")
        try await a.executeScript("COMMIT")
        let error = try await #require(throws: PostgresError.self) { try await b.executeScript("COMMIT") }
        #expect(error.sqlState == .serializationFailure)
        #expect(error.isRetryable)
    }

    struct Abort: Error {}

    @Test func transactionsCommitOnReturnAndRollBackOnThrow() async throws {
        let connection = try await PostgresConnection.connect(try await Self.schema())
        try await connection.withTransaction { tx in
            try await tx.execute("INSERT INTO parent VALUES (\(10))")
        }
        await #expect(throws: Abort.self) {
            try await connection.withTransaction { tx in
                try await tx.execute("INSERT INTO parent VALUES (\(11))")
                throw Abort()
            }
        }
        // A server error inside the transaction also rolls back, and the connection stays usable.
        let error = try await #require(throws: PostgresError.self) {
            try await connection.withTransaction(isolation: .serializable) { tx in
                try await tx.execute("INSERT INTO parent VALUES (\(12))")
                try await tx.execute("INSERT INTO parent VALUES (\(12))")
            }
        }
        #expect(error.sqlState == .uniqueViolation)
        let ids = try await connection.query("SELECT id FROM parent ORDER BY id").map { try $0.decode(Int.self, column: "id") }
        #expect(ids == [1, 2, 10])
    }

    @Test func poolTransactionRollsBack() async throws {
        let pool = PostgresPool(configuration: try await Self.schema(), maxConnections: 2)
        defer { pool.close() }
        await #expect(throws: Abort.self) {
            try await pool.withTransaction { tx in
                try await tx.execute("DELETE FROM parent")
                throw Abort()
            }
        }
        #expect(try await pool.query("SELECT count(*) AS n FROM parent")[0].decode(Int.self, column: "n") == 2)
    }

    @Test func badURLFailsWithConnectionFailed() async throws {
        let error = try await #require(throws: PostgresError.self) {
            try await PostgresConnection.connect(url: "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
        }
        #expect(error.kind == .connectionFailed)
        #expect(error.isRetryable)
    }

    @Test func connectsFromKeyValueSettings() async throws {
        let text = try #require(TestDatabase.url)
        let url = try #require(URLComponents(string: text))
        let host = try #require(url.host)
        let port = try #require(url.port)
        let user = try #require(url.user)
        let connection = try await PostgresConnection.connect(
            PostgresConfiguration(settings: [
                "host": host, "port": String(port), "user": user, "dbname": String(url.path.dropFirst()),
                "application_name": "marquee-test",
            ]))
        let row = try await connection.query("SELECT current_setting('application_name') AS name")[0]
        #expect(try row.decode(String.self, column: "name") == "marquee-test")
    }
}
