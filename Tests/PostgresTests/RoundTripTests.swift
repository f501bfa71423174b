import Foundation
import MarqueeTestSupport
import Postgres
import Testing

@Suite(.enabled(if: TestDatabase.available))
struct RoundTripTests {
    @Test func everySupportedTypeRoundTripsThroughATable() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        try await connection.executeScript(
            """
            CREATE TABLE everything (
                t text, i8 bigint, i4 integer, i2 smallint, b boolean, d double precision,
                bytes bytea, at timestamptz, id uuid, doc jsonb, tags text[])
            """)
        let text = "héllo wörld ✓ 🚀 'quoted' \"double\" back\\slash\ttab\nnewline 日本語"
        let bytes = Data((0...255).map { UInt8($0) })
        let at = Date(timeIntervalSince1970: 1_717_171_717.123456)
        let id = UUID()
        let doc = PostgresJSON(#"{"score": [1, 2], "name": "Zürich ⚽️"}"#)
        let tags = ["a", "", "with space", "comma,brace{}", "quote\"back\\slash", "NULL", "ünï", "😀"]
        try await connection.execute(
            """
            INSERT INTO everything VALUES (\(text), \(Int.max), \(Int32.min), \(Int16.max), \(true),
                \(0.1), \(bytes), \(at), \(id), \(doc), \(tags))
            """)
        let row = try #require(try await connection.query("SELECT * FROM everything").first)
        #expect(try row.decode(String.self, column: "t") == text)
        #expect(try row.decode(Int.self, column: "i8") == Int.max)
        #expect(try row.decode(Int32.self, column: "i4") == Int32.min)
        #expect(try row.decode(Int16.self, column: "i2") == Int16.max)
        #expect(try row.decode(Bool.self, column: "b") == true)
        #expect(try row.decode(Double.self, column: "d") == 0.1)
        #expect(try row.decode(Data.self, column: "bytes") == bytes)
        let decodedAt = try row.decode(Date.self, column: "at")
        #expect(abs(decodedAt.timeIntervalSince1970 - at.timeIntervalSince1970) < 0.000_000_5)
        #expect(try row.decode(UUID.self, column: "id") == id)
        let decodedDoc = try row.decode(PostgresJSON.self, column: "doc")
        struct Doc: Decodable, Equatable {
            let score: [Int]
            let name: String
        }
        #expect(try decodedDoc.decode(Doc.self) == Doc(score: [1, 2], name: "Zürich ⚽️"))
        #expect(try row.decode([String].self, column: "tags") == tags)
    }

    @Test func nullsDecodeToOptionalsAndOptionalBindsSendNull() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        let missing: String? = nil
        let present: Int? = 42
        let row = try #require(
            try await connection.query(
                "SELECT \(missing)::text AS a, \(present) AS b, NULL::timestamptz AS c, NULL::uuid AS d"
            ).first)
        #expect(try row.decode(String?.self, column: "a") == nil)
        #expect(try row.decode(Int?.self, column: "b") == 42)
        #expect(try row.decode(Date?.self, column: "c") == nil)
        #expect(try row.decode(UUID?.self, column: "d") == nil)
        #expect(row.isNull(column: "a"))
        let error = try #require(throws: PostgresError.self) { try row.decode(String.self, column: "a") }
        #expect(error.kind == .decoding)
        #expect(error.column == "a")
    }

    @Test func typedBindsWorkWithoutCasts() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        let at = Date(timeIntervalSince1970: -86_400 * 365.25 * 30 + 0.000_001)  // before 1970, microseconds
        let row = try #require(
            try await connection.query(
                """
                SELECT \(7) + 1 AS n, \(at) AS at, pg_typeof(\(at))::text AS at_type, \(["x", "y"]) AS tags,
                       \(2.5) * 2 AS d, \(false) AS b, \(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")!) AS u
                """
            ).first)
        #expect(try row.decode(Int.self, column: "n") == 8)
        #expect(try row.decode(String.self, column: "at_type") == "timestamp with time zone")
        #expect(
            try row.decode(Date.self, column: "at") == at
                || abs(try row.decode(Date.self, column: "at").timeIntervalSince(at)) < 0.000_000_5)
        #expect(try row.decode([String].self, column: "tags") == ["x", "y"])
        #expect(try row.decode(Double.self, column: "d") == 5)
        #expect(try row.decode(Bool.self, at: 5) == false)
        #expect(try row.decode(UUID.self, column: "u") == UUID(uuidString: "e621e1f8-c36c-495a-93fc-0c247a3e6e5f"))
    }

    @Test func timestamptzIsExactToTheMicrosecondInAnySessionTimeZone() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        let row = try #require(
            try await connection.query(
                """
                SELECT '2024-02-29 23:59:59.999999+00'::timestamptz AS a,
                       extract(epoch FROM '2024-02-29 23:59:59.999999+00'::timestamptz)::text AS a_epoch
                """
            ).first)
        let a = try row.decode(Date.self, column: "a")
        #expect(a == Date(timeIntervalSince1970: 1_709_251_199.999999))
        // The server prints in another zone: the instant must not change.
        try await connection.executeScript("SET TimeZone TO 'Asia/Kolkata'")
        let shifted = try #require(
            try await connection.query(
                """
                SELECT '2024-02-29 23:59:59.999999+00'::timestamptz AS a, \(a)::timestamptz::text AS printed
                """
            ).first)
        #expect(try shifted.decode(String.self, column: "printed").hasSuffix("+05:30"))
        #expect(try shifted.decode(Date.self, column: "a") == a)
    }

    @Test func doublesKeepEveryBitAndSpecialValues() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        for value in [0.1, 1e300, -2.5e-308, Double.pi, .infinity, -.infinity, 123_456_789.123_456_78] {
            let row = try #require(try await connection.query("SELECT \(value) AS v").first)
            #expect(try row.decode(Double.self, column: "v") == value)
        }
        let nan = try #require(try await connection.query("SELECT \(Double.nan) AS v").first)
        #expect(try nan.decode(Double.self, column: "v").isNaN)
    }

    @Test func interpolatedValuesCannotInjectSQL() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        try await connection.executeScript("CREATE TABLE people (name text)")
        let hostile = "x'); DROP TABLE people; --"
        try await connection.execute("INSERT INTO people (name) VALUES (\(hostile))")
        let rows = try await connection.query("SELECT name FROM people WHERE name = \(hostile)")
        #expect(rows.count == 1)
        #expect(try rows[0].decode(String.self, column: "name") == hostile)
    }

    @Test func identifiersAreQuoted() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        let table = "odd \"name\"; DROP"
        try await connection.executeScript("CREATE TABLE \(identifier: table) (v int)")
        #expect(try await connection.execute("INSERT INTO \(identifier: table) (v) VALUES (\(Int32(1))), (\(Int32(2)))") == 2)
        let count = try await connection.query("SELECT count(*) AS n FROM \(identifier: table)")[0]
        #expect(try count.decode(Int.self, column: "n") == 2)
    }

    private enum Spelling: String, CaseIterable {
        case plain
        case quoted = "it's"
        case doubled = "''"
    }

    @Test func staticLiteralsAndListsDoubleTheirQuotes() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        for spelling in Spelling.allCases {
            let row = try await connection.query("SELECT \(PostgresStaticSQL.literal(spelling)) AS v")[0]
            #expect(try row.decode(String.self, column: "v") == spelling.rawValue)
        }
        #expect(PostgresStaticSQL.list(Spelling.allCases).text == "('plain', 'it''s', '''''')")
        let found = try await connection.query(
            "SELECT v FROM unnest(\(Spelling.allCases.map(\.rawValue))::text[]) AS v WHERE v IN \(PostgresStaticSQL.list(Spelling.allCases))")
        #expect(try found.map { try $0.decode(String.self, column: "v") } == Spelling.allCases.map(\.rawValue))
    }

    @Test func identifiersDropNul() {
        let query: PostgresQuery = "SELECT 1 FROM \(identifier: "a\u{0}b\"c")"
        #expect(query.sql == "SELECT 1 FROM \"ab\"\"c\"")
    }

    @Test func fragmentsRenumberTheirPlaceholders() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        let filter: PostgresQuery = "x > \(1) AND x < \(5)"
        let direct = try await connection.query(
            "SELECT x FROM generate_series(\(0), \(10)) AS x WHERE \(fragment: filter) ORDER BY x")
        #expect(try direct.map { try $0.decode(Int.self, column: "x") } == [2, 3, 4])
        // An apostrophe in a comment opens no quote: the placeholders after it are renumbered too.
        let commented: PostgresQuery = "x > \(1) -- the window's lower bound\n AND x < \(5)"
        let shifted = try await connection.query(
            "SELECT x FROM generate_series(\(0), \(10)) AS x WHERE \(fragment: commented) ORDER BY x")
        #expect(try shifted.map { try $0.decode(Int.self, column: "x") } == [2, 3, 4])
    }

    enum Status: String, PostgresCodable { case live, ended }

    @Test func rawRepresentableEnumsBindAndDecodeAsTheirRawValues() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        let row = try #require(try await connection.query("SELECT \(Status.live)::text AS s, 'ended' AS t, 'paused' AS u").first)
        #expect(try row.decode(Status.self, column: "s") == .live)
        #expect(try row.decode(Status.self, column: "t") == .ended)
        let error = try #require(throws: PostgresError.self) { try row.decode(Status.self, column: "u") }
        #expect(error.column == "u")
    }

    @Test func textArraysWithNullElementsAreRefusedNotMangled() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        let row = try #require(try await connection.query("SELECT ARRAY['a', NULL]::text[] AS tags, '{}'::text[] AS empty").first)
        let error = try #require(throws: PostgresError.self) { try row.decode([String].self, column: "tags") }
        #expect(error.column == "tags")
        #expect(try row.decode([String].self, column: "empty") == [])
    }

    @Test func decodingErrorsNameTheColumnAndType() async throws {
        let connection = try await PostgresConnection.connect(TestDatabase.shared)
        let row = try #require(try await connection.query("SELECT 'abc'::text AS label").first)
        let error = try #require(throws: PostgresError.self) { try row.decode(Int.self, column: "label") }
        #expect(error.kind == .decoding)
        #expect(error.column == "label")
        #expect(error.description.contains("label"))
        #expect(!error.isRetryable)
        let missing = try #require(throws: PostgresError.self) { try row.decode(Int.self, column: "nope") }
        #expect(missing.kind == .misuse)
    }

    @Test func aValueAndANilOfOneTypeShareOnePreparedStatement() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        let ids: [Int?] = [1, nil, 2, nil]
        let whens: [Date?] = [Date(), nil]
        for id in ids {
            for when in whens {
                let row = try await connection.query("SELECT \(id) AS id, \(when) AS at")[0]
                #expect(try row.decode(Int?.self, column: "id") == id)
                #expect(try row.decode(Date?.self, column: "at").map { abs($0.timeIntervalSince(when!)) < 0.001 } ?? (when == nil))
            }
        }
        let prepared = try await connection.query(
            """
            SELECT parameter_types::text AS types FROM pg_prepared_statements WHERE statement LIKE 'SELECT $1 AS id%'
            """)
        #expect(try prepared.map { try $0.decode(String.self, column: "types") } == ["{bigint,\"timestamp with time zone\"}"])
    }

    @Test func preparedStatementsSurviveDiscardAndTableChanges() async throws {
        let connection = try await PostgresConnection.connect(try await TestDatabase.fresh())
        try await connection.executeScript("CREATE TABLE shapes (a int); INSERT INTO shapes VALUES (1)")
        let select: PostgresQuery = "SELECT * FROM shapes WHERE a >= \(0)"
        #expect(try await connection.query(select).columns == ["a"])
        try await connection.executeScript("ALTER TABLE shapes ADD COLUMN b text DEFAULT 'x'")
        #expect(try await connection.query(select).columns == ["a", "b"])
        try await connection.executeScript("DISCARD ALL")
        #expect(try await connection.query(select).count == 1)
        try await connection.executeScript("SET TimeZone TO 'UTC'")
        for value in 0..<300 {  // past the prepared-statement limit: the rest run unnamed
            let row = try await connection.query(PostgresQuery(unsafeSQL: "SELECT \(value) AS v"))[0]
            #expect(try row.decode(Int.self, column: "v") == value)
        }
    }
}
