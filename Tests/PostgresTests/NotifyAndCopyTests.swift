import Foundation
import MarqueeTestSupport
import Postgres
import Testing

@Suite(.enabled(if: TestDatabase.available))
struct NotifyAndCopyTests {
    @Test func notificationsArriveOnTheListener() async throws {
        let configuration = try await TestDatabase.fresh()
        let channel = "marquee events ✓"
        let listener = PostgresListener(configuration: configuration, channels: [channel, "other"])
        defer { listener.stop() }
        var events = listener.events.makeAsyncIterator()
        #expect(await events.next() == .listening)
        let sender = try await PostgresConnection.connect(configuration)
        try await sender.query("SELECT pg_notify(\(channel), \("payload ü 1"))")
        try await sender.query("SELECT pg_notify(\("other"), \(""))")
        try await sender.query("SELECT pg_notify(\("not-listened"), \("x"))")
        try await sender.query("SELECT pg_notify(\(channel), \("payload 2"))")
        var received: [PostgresNotification] = []
        while received.count < 3, let event = await events.next() {
            if case .notification(let notification) = event { received.append(notification) }
        }
        #expect(received.map(\.channel) == [channel, "other", channel])
        #expect(received.map(\.payload) == ["payload ü 1", "", "payload 2"])
        #expect(received.allSatisfy { $0.backendPID == sender.backendPID })
    }

    @Test func stoppingTheListenerFinishesItsEvents() async throws {
        let listener = PostgresListener(configuration: TestDatabase.shared, channels: ["quiet"])
        var events = listener.events.makeAsyncIterator()
        #expect(await events.next() == .listening)
        listener.stop()
        #expect(await events.next() == nil)
    }

    @Test func copyStreamsOneHundredThousandRowsWithEscaping() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        try await connection.executeScript(
            """
            CREATE TABLE copied (n bigint, label text, flag boolean, at timestamptz, blob bytea, tags text[])
            """)
        let at = Date(timeIntervalSince1970: 1_700_000_000.654321)
        let tricky = "tab\there\nnewline\\backslash\r\\N ü"
        let count = try await connection.copyFrom(
            "COPY copied (n, label, flag, at, blob, tags) FROM STDIN", bufferSize: 256 * 1024
        ) { writer in
            for n in 0..<100_000 {
                let label: String? = n % 10 == 0 ? nil : (n == 7 ? tricky : "row \(n)")
                try await writer.write(n, label, n % 2 == 0, at, Data([UInt8(n % 256), 0, 92]), ["a\tb", "c"])
            }
        }
        #expect(count == 100_000)
        let summary = try await connection.query(
            """
            SELECT count(*) AS rows, count(label) AS labels, sum(n) AS total FROM copied
            """)[0]
        #expect(try summary.decode(Int.self, column: "rows") == 100_000)
        #expect(try summary.decode(Int.self, column: "labels") == 90_000)
        #expect(try summary.decode(Int.self, column: "total") == (0..<100_000).reduce(0, +))
        let seven = try await connection.query("SELECT * FROM copied WHERE n = \(7)")[0]
        #expect(try seven.decode(String.self, column: "label") == tricky)
        #expect(try seven.decode(Bool.self, column: "flag") == false)
        #expect(try seven.decode(Date.self, column: "at") == Date(postgresText: "2023-11-14 22:13:20.654321+00"))
        #expect(try seven.decode(Data.self, column: "blob") == Data([7, 0, 92]))
        #expect(try seven.decode([String].self, column: "tags") == ["a\tb", "c"])
        #expect(try await connection.query("SELECT label FROM copied WHERE n = \(10)")[0].decode(String?.self, column: "label") == nil)
    }

    @Test func copyTakesRowsOfMixedTypesAndQuotedNames() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        try await connection.executeScript(#"CREATE TABLE "Odd Table" ("the id" int, note text, seen timestamptz)"#)
        let rows: [[any PostgresEncodable]] = [[Int32(1), "a\\b", Date(timeIntervalSince1970: 0)], [Int32(2), String?.none, Date?.none]]
        let count = try await connection.copyFrom("COPY \(identifier: "Odd Table") (\(identifier: "the id"), note, seen) FROM STDIN") { writer in
            for row in rows { try await writer.write(row: row) }
        }
        #expect(count == 2)
        let stored = try await connection.query(#"SELECT note, seen FROM "Odd Table" ORDER BY "the id""#)
        #expect(try stored[0].decode(String.self, column: "note") == "a\\b")
        #expect(try stored[0].decode(Date.self, column: "seen") == Date(timeIntervalSince1970: 0))
        #expect(try stored[1].decode(String?.self, column: "note") == nil)
        #expect(try stored[1].decode(Date?.self, column: "seen") == nil)
    }

    struct Stop: Error {}

    @Test func aFailedCopyCopiesNothingAndLeavesTheConnectionUsable() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        try await connection.executeScript("CREATE TABLE copied (n int)")
        await #expect(throws: Stop.self) {
            try await connection.copyFrom("COPY copied (n) FROM STDIN") { writer in
                try await writer.write(1)
                throw Stop()
            }
        }
        let bad = try await #require(throws: PostgresError.self) {
            try await connection.copyFrom("COPY copied (n) FROM STDIN") { writer in
                try await writer.write("not a number")
            }
        }
        #expect(bad.sqlState == .invalidTextRepresentation)
        #expect(try await connection.query("SELECT count(*) AS n FROM copied")[0].decode(Int.self, column: "n") == 0)
    }
}
