import Foundation
import MarqueeTestSupport
import Postgres
import Testing

@testable import MarqueeStore

@Suite(.enabled(if: TestDatabase.available))
struct MigrationRunnerTests {
    static let base = [
        Migration(
            name: "0001_log.sql",
            sql: """
                CREATE TABLE applied_log (name text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
                INSERT INTO applied_log (name) VALUES ('0001');
                """),
        Migration(
            name: "0002_items.sql",
            sql: """
                CREATE TABLE items (id int PRIMARY KEY, label text);
                INSERT INTO applied_log (name) VALUES ('0002');
                """),
    ]

    static func names(_ rows: PostgresRows) throws -> [String] {
        try rows.map { try $0.decode(String.self, column: "name") }
    }

    @Test func appliesInOrderOnceAndIsIdempotent() async throws {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 2)
        defer { pool.close() }
        let runner = MigrationRunner(pool: pool, migrations: Self.base.reversed())
        #expect(try await runner.pendingMigrations() == ["0001_log.sql", "0002_items.sql"])
        #expect(try await runner.migrate() == ["0001_log.sql", "0002_items.sql"])
        #expect(try await runner.migrate() == [])
        #expect(try await runner.pendingMigrations() == [])
        try await runner.requireCurrentSchema()
        #expect(try Self.names(await pool.query("SELECT name FROM applied_log ORDER BY at")) == ["0001", "0002"])
        let recorded = try await pool.query(
            """
            SELECT name, checksum = encode(sha256(convert_to(\(Self.base[0].sql), 'UTF8')), 'hex') AS matches
            FROM schema_migrations ORDER BY name
            """)
        #expect(try Self.names(recorded) == ["0001_log.sql", "0002_items.sql"])
        #expect(try recorded[0].decode(Bool.self, column: "matches"))

        // A new file is pending until applied.
        let grown = MigrationRunner(
            pool: pool,
            migrations: Self.base + [
                Migration(name: "0003_more.sql", sql: "INSERT INTO applied_log (name) VALUES ('0003');")
            ])
        #expect(try await grown.pendingMigrations() == ["0003_more.sql"])
        let behind = try await #require(throws: MigrationError.self) { try await grown.requireCurrentSchema() }
        guard case .pending(let names) = behind else {
            Issue.record("unexpected \(behind)")
            return
        }
        #expect(names == ["0003_more.sql"])
        #expect(try await grown.migrate() == ["0003_more.sql"])
    }

    @Test func refusesToRunWhenALandedFileWasEdited() async throws {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 1)
        defer { pool.close() }
        try await MigrationRunner(pool: pool, migrations: Self.base).migrate()
        var edited = Self.base
        edited[1] = Migration(name: "0002_items.sql", sql: Self.base[1].sql + "\n-- a harmless-looking comment\n")
        edited.append(Migration(name: "0003_more.sql", sql: "INSERT INTO applied_log (name) VALUES ('0003');"))
        let runner = MigrationRunner(pool: pool, migrations: edited)
        for attempt in [{ try await runner.migrate() }, { try await runner.pendingMigrations() }] {
            let error = try await #require(throws: MigrationError.self) { _ = try await attempt() }
            guard case .editedMigration(let name, _, _) = error else {
                Issue.record("unexpected \(error)")
                return
            }
            #expect(name == "0002_items.sql")
            #expect(error.description.contains("0002_items.sql"))
        }
        // Nothing after the edited file ran.
        #expect(try await pool.query("SELECT 1 FROM applied_log WHERE name = '0003'").isEmpty)
    }

    @Test func aFailedMigrationIsRolledBackAndNotRecorded() async throws {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 1)
        defer { pool.close() }
        let broken =
            Self.base + [
                Migration(
                    name: "0003_broken.sql",
                    sql: """
                        CREATE TABLE half_done (id int);
                        SELECT 1 / 0;
                        """)
            ]
        let error = try await #require(throws: MigrationError.self) {
            try await MigrationRunner(pool: pool, migrations: broken).migrate()
        }
        guard case .failed(let name, let underlying) = error else {
            Issue.record("unexpected \(error)")
            return
        }
        #expect(name == "0003_broken.sql")
        #expect((underlying as? PostgresError)?.sqlState == SQLState(rawValue: "22012"))
        #expect(try await pool.query("SELECT to_regclass('half_done') IS NULL AS gone")[0].decode(Bool.self, column: "gone"))
        #expect(try await MigrationRunner(pool: pool, migrations: broken).pendingMigrations() == ["0003_broken.sql"])
        // The lock was released: a fixed file applies.
        let fixed = Self.base + [Migration(name: "0003_broken.sql", sql: "CREATE TABLE half_done (id int);")]
        #expect(try await MigrationRunner(pool: pool, migrations: fixed).migrate() == ["0003_broken.sql"])
    }

    @Test func racingRunnersBothSucceedAndApplyEachMigrationOnce() async throws {
        let configuration = try await TestDatabase.fresh()
        let migrations =
            Self.base + [
                Migration(
                    name: "0003_slow.sql",
                    sql: """
                        SELECT pg_sleep(0.3);
                        INSERT INTO items VALUES (1, 'one');
                        INSERT INTO applied_log (name) VALUES ('0003');
                        """),
                Migration(
                    name: "0004_concurrent_index.sql",
                    sql: """
                        -- marquee:no-transaction
                        -- CREATE INDEX CONCURRENTLY cannot run in a transaction; the other runner must not block it.
                        CREATE INDEX CONCURRENTLY IF NOT EXISTS items_label ON items (label);
                        INSERT INTO applied_log (name) VALUES ('0004; with a semicolon in a string');
                        """),
            ]
        let pools = (0..<3).map { _ in PostgresPool(configuration: configuration, maxConnections: 1) }
        defer { for pool in pools { pool.close() } }
        let results = try await withThrowingTaskGroup(of: [String].self) { group in
            for pool in pools {
                group.addTask { try await MigrationRunner(pool: pool, migrations: migrations, pollInterval: .milliseconds(20)).migrate() }
            }
            var all: [[String]] = []
            for try await applied in group { all.append(applied) }
            return all
        }
        #expect(results.flatMap { $0 }.sorted() == migrations.map(\.name))
        let log = try await pools[0].query("SELECT name, count(*) AS n FROM applied_log GROUP BY name ORDER BY name")
        #expect(try Self.names(log) == ["0001", "0002", "0003", "0004; with a semicolon in a string"])
        #expect(try log.allSatisfy { try $0.decode(Int.self, column: "n") == 1 })
        let index = try await pools[0].query(
            """
            SELECT indisvalid FROM pg_index WHERE indexrelid = 'items_label'::regclass
            """)
        #expect(try index[0].decode(Bool.self, column: "indisvalid"))
    }

    @Test func rejectsBadFileNames() async throws {
        let pool = PostgresPool(configuration: PostgresConfiguration(url: TestDatabase.url!), maxConnections: 1)
        defer { pool.close() }
        for bad in [
            [Migration(name: "init.sql", sql: "")],
            [Migration(name: "0001_a.sql", sql: ""), Migration(name: "0001_b.sql", sql: "")],
        ] {
            let error = try await #require(throws: MigrationError.self) {
                try await MigrationRunner(pool: pool, migrations: bad).migrate()
            }
            guard case .invalidName = error else {
                Issue.record("unexpected \(error)")
                return
            }
        }
    }
}

@Suite struct MigrationFileTests {
    @Test func markerOnTheFirstLineTurnsTransactionsOff() {
        #expect(Migration(name: "0001_a.sql", sql: "-- marquee:no-transaction\nCREATE INDEX CONCURRENTLY x ON y (z);").runsInTransaction == false)
        #expect(Migration(name: "0001_a.sql", sql: "-- marquee:no-transaction  \r\nSELECT 1;").runsInTransaction == false)
        #expect(Migration(name: "0001_a.sql", sql: "SELECT 1;\n-- marquee:no-transaction\n").runsInTransaction)
        #expect(Migration(name: "0001_a.sql", sql: "-- marquee: something else\n").runsInTransaction)
    }

    @Test func splitterKeepsSemicolonsInsideStringsCommentsAndBodies() {
        let sql = """
            -- leading comment; with a semicolon
            CREATE TABLE a (t text DEFAULT 'x;y' CHECK (t <> E'\\';'));
            /* block; /* nested; */ still comment; */
            CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $body$;
            SELECT $$a;b$$, "odd;name" FROM a;
            SELECT 'it''s; fine'
            """
        let statements = SQLStatementSplitter.split(sql)
        #expect(statements.count == 4)
        #expect(statements[0].hasSuffix("CHECK (t <> E'\\';'))"))
        #expect(statements[1].hasSuffix("AS $body$ SELECT 1; $body$"))
        #expect(statements[2].hasPrefix("SELECT $$a;b$$"))
        #expect(statements[3] == "SELECT 'it''s; fine'")
        #expect(SQLStatementSplitter.split("-- only a comment\n;\n  ;") == [])
    }

    @Test func embeddedMigrationsAreTheSqlFolder() throws {
        let folder = RepositoryCheckout.root.appendingPathComponent("Sql")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path)
            .filter { $0.hasSuffix(".sql") && $0.first?.isNumber == true }.sorted()
        #expect(Migration.embedded.map(\.name) == files)
        for migration in Migration.embedded {
            #expect(migration.hasValidName)
            let text = try String(contentsOf: folder.appendingPathComponent(migration.name), encoding: .utf8)
            #expect(migration.sql == text)
        }
    }
}
