import Foundation
import MarqueeStore
import MarqueeTestSupport
import Postgres
import Testing

/// The real Sql/0001_init.sql on an empty database, and the invariants its constraints enforce.
@Suite(.enabled(if: TestDatabase.available))
struct InitialSchemaTests {
    static func migratedPool() async throws -> PostgresPool {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 2)
        let applied = try await MigrationRunner(pool: pool).migrate()
        #expect(applied == Migration.embedded.map(\.name))
        #expect(applied.first == "0001_init.sql")
        return pool
    }

    /// An app, its attribute type and one event; returns (app, event) ids.
    static func seed(_ pool: PostgresPool, bundle: String = "com.example.scores") async throws -> (app: Int, type: Int, event: Int) {
        try await pool.withTransaction { tx in
            let app = try await tx.query(
                """
                INSERT INTO apps (bundle_id, environment, team_id, key_id, key_path)
                VALUES (\(bundle), 'development', 'ABCDE12345', 'KEY1234567', 'keys/AuthKey.p8') RETURNING id
                """)[0].decode(Int.self, column: "id")
            let type = try await tx.query(
                """
                INSERT INTO attribute_types (app_id, name, attributes_schema, content_state_schema)
                VALUES (\(app), 'MatchAttributes', \(PostgresJSON("{}")), \(PostgresJSON("{}"))) RETURNING id
                """)[0].decode(Int.self, column: "id")
            let event = try await tx.query(
                """
                INSERT INTO events (app_id, external_id, kind, attribute_type_id, storage_policy, starts_at, topics)
                VALUES (\(app), 'match-1', 'match', \(type), 'mostRecent', now(), \(["football"])) RETURNING id
                """)[0].decode(Int.self, column: "id")
            return (app, type, event)
        }
    }

    /// An ingest key; returns its id.
    /// A fresh database migrated up to (not including) `migration`, for testing that migration on rows.
    static func poolMigrated(before migration: String) async throws -> PostgresPool {
        let pool = PostgresPool(configuration: try await TestDatabase.fresh(), maxConnections: 2)
        let earlier = Migration.embedded.filter { $0.name < migration }
        #expect(try await MigrationRunner(pool: pool, migrations: earlier).migrate() == earlier.map(\.name))
        return pool
    }

    static func seedKey(_ pool: PostgresPool) async throws -> Int {
        try await pool.query(
            """
            INSERT INTO api_keys (name, prefix, salt, hash, scopes)
            VALUES ('feed', 'mqfeed', \(Data(count: 16)), \(Data(count: 32)), \(["ingest"])) RETURNING id
            """)[0].decode(Int.self, column: "id")
    }

    @Test func appliesToAnEmptyDatabaseAndAgainIsANoOp() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        #expect(try await MigrationRunner(pool: pool).migrate() == [])
        let tables = try await pool.query(
            """
            SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1
            """
        ).map { try $0.decode(String.self, column: "name") }
        #expect(
            tables == [
                "activities", "api_keys", "app_credential_faults", "apps", "attribute_type_policies", "attribute_types", "channels", "deliveries",
                "event_changes", "events",
                "follows", "idempotency_keys", "installations", "instance_heartbeats", "leader_leases", "mirror_chunks", "mirror_passes", "outbox",
                "purged_update_counts",
                "schema_migrations", "start_chunks", "start_runs", "start_windows", "starts", "token_invalidations", "token_routes", "updates",
            ])
        let file = try String(contentsOf: RepositoryCheckout.root.appendingPathComponent("Sql/0001_init.sql"), encoding: .utf8)
        let matches = try await pool.query(
            """
            SELECT checksum = encode(sha256(convert_to(\(file), 'UTF8')), 'hex') AS same
            FROM schema_migrations WHERE name = '0001_init.sql'
            """)
        #expect(try matches[0].decode(Bool.self, column: "same"))
    }

    @Test func constraintsRefuseWrongStates() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let (app, type, event) = try await Self.seed(pool)
        func refused(_ query: PostgresQuery) async throws -> SQLState? {
            do {
                try await pool.execute(query)
                return nil
            } catch let error as PostgresError {
                return error.sqlState
            }
        }
        // One live channel per event.
        try await pool.execute(
            """
            INSERT INTO channels (app_id, event_id, apns_channel_id, storage_policy, state, requested_at, opened_at, first_seen_at)
            VALUES (\(app), \(event), 'dHVyYm8tY2hhbm5lbA==', 'mostRecent', 'open', now(), now(), now())
            """)
        #expect(
            try await refused(
                """
                INSERT INTO channels (app_id, event_id, storage_policy, state, requested_at)
                VALUES (\(app), \(event), 'mostRecent', 'creating', now())
                """) == .uniqueViolation)
        // An open channel needs its APNs id; an unknown channel needs no event, others do.
        #expect(
            try await refused(
                """
                INSERT INTO channels (app_id, event_id, storage_policy, state, opened_at) VALUES (\(app), \(event), 'none', 'open', now())
                """) == .checkViolation)
        #expect(
            try await refused(
                """
                INSERT INTO channels (app_id, storage_policy, state, requested_at) VALUES (\(app), 'none', 'creating', now())
                """) == .checkViolation)
        try await pool.execute(
            """
            INSERT INTO channels (app_id, apns_channel_id, storage_policy, state, first_seen_at)
            VALUES (\(app), 'b3RoZXI=', 'none', 'unknown', now())
            """)
        // Rows of one app cannot point at another app's event or type.
        let other = try await Self.seed(pool, bundle: "com.example.flights")
        #expect(
            try await refused(
                """
                INSERT INTO channels (app_id, event_id, storage_policy, state, requested_at)
                VALUES (\(app), \(other.event), 'none', 'creating', now())
                """) == .foreignKeyViolation)
        #expect(
            try await refused(
                """
                INSERT INTO events (app_id, external_id, kind, attribute_type_id, storage_policy, starts_at)
                VALUES (\(other.app), 'x', 'flight', \(type), 'none', now())
                """) == .foreignKeyViolation)
        // Enumerations and shapes.
        #expect(try await refused("UPDATE events SET status = 'paused' WHERE id = \(event)") == .checkViolation)
        #expect(try await refused("UPDATE events SET ends_at = starts_at - interval '1 hour' WHERE id = \(event)") == .checkViolation)
        #expect(
            try await refused(
                """
                INSERT INTO apps (bundle_id, environment, team_id, key_id, key_path)
                VALUES ('com.example.scores', 'development', 'ABCDE12345', 'KEY1234567', 'k.p8')
                """) == .uniqueViolation)
        #expect(
            try await refused(
                """
                INSERT INTO api_keys (name, prefix, salt, hash, scopes)
                VALUES ('feed', 'mq_abc123', \(Data(count: 16)), \(Data(count: 32)), \(["ingest", "root"]))
                """) == .checkViolation)
        #expect(
            try await refused(
                """
                INSERT INTO updates (event_id, content_state, occurred_at, priority) VALUES (\(event), '{}', now(), 'urgent')
                """) == .checkViolation)
        // Device tokens (Sql/0029): 64 to 200 lower-case hex digits, nothing else.
        for (number, token) in [String(repeating: "a", count: 64), String(repeating: "0f", count: 100)].enumerated() {
            try await pool.execute(
                """
                INSERT INTO installations (app_id, installation_id, push_to_start_token, token_registered_at, token_seen_at)
                VALUES (\(app), \("good-\(number)"), \(token), now(), now())
                """)
        }
        for token in [
            String(repeating: "a", count: 63), String(repeating: "a", count: 201), String(repeating: "A", count: 64),
            String(repeating: "a", count: 63) + "g", String(repeating: "a", count: 63) + "\n",
        ] {
            #expect(
                try await refused(
                    """
                    INSERT INTO installations (app_id, installation_id, push_to_start_token, token_registered_at, token_seen_at)
                    VALUES (\(app), 'bad', \(token), now(), now())
                    """) == .checkViolation, "\(token)")
        }
        _ = type
    }

    /// Sql/0017: the tables written for every update and broadcast keep no single-column CHECK (PostgreSQL
    /// compiles a table's CHECKs for every statement that writes it); their columns' domains refuse the
    /// same values, with the same SQLSTATE.
    @Test func theHotTablesCheckSingleColumnsThroughDomains() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let singleColumnChecks = try await pool.query(
            """
            SELECT conname FROM pg_constraint
            WHERE contype = 'c' AND cardinality(conkey) = 1
              AND conrelid::regclass::text IN ('events', 'channels', 'updates', 'outbox', 'idempotency_keys', 'deliveries')
            ORDER BY 1
            """
        ).map { try $0.decode(String.self, column: "conname") }
        #expect(singleColumnChecks == [])

        let (app, _, event) = try await Self.seed(pool)
        let key = try await Self.seedKey(pool)
        let (channel, update) = try await pool.withTransaction { tx in
            let channel = try await tx.query(
                """
                INSERT INTO channels (app_id, event_id, apns_channel_id, storage_policy, state, opened_at, first_seen_at)
                VALUES (\(app), \(event), 'dHVyYm8=', 'mostRecent', 'open', now(), now()) RETURNING id
                """)[0].decode(Int.self, column: "id")
            let update = try await tx.query(
                """
                INSERT INTO updates (event_id, content_state, occurred_at) VALUES (\(event), '{}', now()) RETURNING id
                """)[0].decode(Int.self, column: "id")
            try await tx.execute(
                """
                UPDATE events SET latest_state = '{}', latest_state_at = now(), latest_update_id = \(update) WHERE id = \(event)
                """)
            try await tx.execute("INSERT INTO outbox (event_id, channel_id, update_id) VALUES (\(event), \(channel), \(update))")
            try await tx.execute(
                """
                INSERT INTO idempotency_keys (api_key_id, key, request_hash, update_id) VALUES (\(key), 'k1', \(Data(count: 32)), \(update))
                """)
            try await tx.execute(
                """
                INSERT INTO deliveries (app_id, kind, channel_id, update_id, status, latency_us, priority)
                VALUES (\(app), 'broadcast', \(channel), \(update), 200, 900, 5)
                """)
            return (channel, update)
        }
        // One wrong value per column that had a single-column CHECK; the other columns set keep the
        // multi-column CHECKs satisfied, so only the domain can refuse.
        let wrongValues: [(String, PostgresQuery)] = [
            ("events.attributes", "UPDATE events SET attributes = '[]' WHERE id = \(event)"),
            ("events.external_id", "UPDATE events SET external_id = '' WHERE id = \(event)"),
            ("events.kind", "UPDATE events SET kind = 'concert' WHERE id = \(event)"),
            ("events.latest_state", "UPDATE events SET latest_state = '[1]' WHERE id = \(event)"),
            ("events.status", "UPDATE events SET status = 'paused' WHERE id = \(event)"),
            ("events.storage_policy", "UPDATE events SET storage_policy = 'forever' WHERE id = \(event)"),
            ("channels.apns_channel_id", "UPDATE channels SET apns_channel_id = 'not base64!' WHERE id = \(channel)"),
            ("channels.attempts", "UPDATE channels SET attempts = -1 WHERE id = \(channel)"),
            ("channels.last_aps_timestamp", "UPDATE channels SET last_aps_timestamp = 0 WHERE id = \(channel)"),
            ("channels.state", "UPDATE channels SET state = 'paused' WHERE id = \(channel)"),
            ("channels.storage_policy", "UPDATE channels SET storage_policy = 'forever' WHERE id = \(channel)"),
            ("updates.action", "UPDATE updates SET action = 'start' WHERE id = \(update)"),
            ("updates.alert", "UPDATE updates SET alert = '\"goal\"' WHERE id = \(update)"),
            ("updates.content_state", "UPDATE updates SET content_state = '[]' WHERE id = \(update)"),
            ("updates.disposition", "UPDATE updates SET disposition = 'lost', disposed_at = now() WHERE id = \(update)"),
            ("updates.priority", "UPDATE updates SET priority = 'urgent' WHERE id = \(update)"),
            ("updates.relevance_score", "UPDATE updates SET relevance_score = -1 WHERE id = \(update)"),
            ("outbox.aps_timestamp", "UPDATE outbox SET aps_timestamp = 0 WHERE event_id = \(event)"),
            ("outbox.attempts", "UPDATE outbox SET attempts = -1 WHERE event_id = \(event)"),
            (
                "outbox.claimed_by",
                """
                UPDATE outbox SET claimed_by = '', claim_token = gen_random_uuid(), claimed_until = now() WHERE event_id = \(event)
                """
            ),
            ("idempotency_keys.key", "UPDATE idempotency_keys SET key = '' WHERE api_key_id = \(key)"),
            ("idempotency_keys.request_hash", "UPDATE idempotency_keys SET request_hash = '\\x00' WHERE api_key_id = \(key)"),
            ("deliveries.attempt", "UPDATE deliveries SET attempt = 0 WHERE update_id = \(update)"),
            ("deliveries.kind", "UPDATE deliveries SET kind = 'sms' WHERE update_id = \(update)"),
            ("deliveries.latency_us", "UPDATE deliveries SET latency_us = -1 WHERE update_id = \(update)"),
            ("deliveries.priority", "UPDATE deliveries SET priority = 3 WHERE update_id = \(update)"),
            ("deliveries.status", "UPDATE deliveries SET status = 99 WHERE update_id = \(update)"),
        ]
        for (column, statement) in wrongValues {
            var state: SQLState?
            do { try await pool.execute(statement) } catch let error as PostgresError { state = error.sqlState }
            #expect(state == .checkViolation, "\(column)")
        }
    }

    /// Sql/0017 on a database that already has rows, every enumerated value among them: each column takes
    /// its domain without refusing or changing a row (a domain narrower than the CHECK it replaces would
    /// refuse one here).
    @Test func theDomainsMigrationKeepsEveryRowOfAnUpgradedDatabase() async throws {
        let pool = try await Self.poolMigrated(before: "0017")
        defer { pool.close() }
        let (app, type, _) = try await Self.seed(pool)
        let key = try await Self.seedKey(pool)
        try await pool.withTransaction { tx in
            try await tx.execute(
                """
                INSERT INTO events (app_id, external_id, kind, attribute_type_id, attributes, storage_policy, status, starts_at)
                SELECT \(app), 'e' || n, (ARRAY['match', 'flight', 'other'])[1 + n % 3], \(type), '{"n": 1}',
                       (ARRAY['none', 'mostRecent'])[1 + n % 2],
                       (ARRAY['scheduled', 'live', 'ending', 'ended', 'cancelled'])[1 + n % 5], now()
                FROM generate_series(1, 12) n
                """)
            try await tx.execute(
                """
                INSERT INTO channels (app_id, event_id, apns_channel_id, storage_policy, state, attempts, requested_at,
                                      opened_at, ended_at, deleted_at, first_seen_at, last_aps_timestamp)
                SELECT \(app), e.id, CASE WHEN s.state NOT IN ('planned', 'creating', 'create_unknown', 'create_failed')
                                          THEN 'Y2hhbm5lbA' || e.id || '==' END,
                       'mostRecent', s.state, s.n, now(), now(), now(), now(), now(), 1000 + s.n
                FROM unnest(ARRAY['planned', 'creating', 'create_unknown', 'create_failed', 'open', 'ending', 'ended',
                                  'deleting', 'deleted', 'lost', 'unknown']) WITH ORDINALITY s(state, n)
                JOIN events e ON e.external_id = 'e' || s.n
                """)
            try await tx.execute(
                """
                INSERT INTO updates (event_id, action, content_state, alert, dismissal_date, relevance_score, priority,
                                     occurred_at, disposition, disposed_at)
                SELECT e.id, (ARRAY['update', 'end'])[1 + n % 2], '{"home": 1}', CASE WHEN n % 2 = 0 THEN '{"title": "Goal"}'::jsonb END,
                       CASE WHEN n % 2 = 1 THEN now() END, n * 10, (ARRAY['auto', 'high', 'low'])[1 + n % 3], now(),
                       d.disposition, CASE WHEN d.disposition <> 'pending' THEN now() END
                FROM generate_series(1, 10) n
                JOIN events e ON e.external_id = 'e' || n
                JOIN unnest(ARRAY['pending', 'broadcast', 'conflated', 'superseded', 'unsent']) WITH ORDINALITY d(disposition, i)
                  ON i = 1 + n % 5
                """)
            try await tx.execute(
                """
                INSERT INTO outbox (event_id, channel_id, update_id, attempts, claimed_by, claim_token, claimed_until, aps_timestamp)
                SELECT u.event_id, c.id, u.id, 2, 'serve-1', gen_random_uuid(), now(), 2000
                FROM updates u JOIN channels c ON c.event_id = u.event_id WHERE u.disposition = 'pending'
                """)
            try await tx.execute(
                """
                INSERT INTO idempotency_keys (api_key_id, key, request_hash, response_status, response_body, update_id)
                SELECT \(key), 'key-' || u.id, \(Data(count: 32)), 202, '\\x7b7d', u.id FROM updates u
                """)
            try await tx.execute(
                """
                INSERT INTO deliveries (app_id, kind, channel_id, update_id, status, reason, latency_us, priority, attempt)
                SELECT \(app), k.kind, c.id, NULL, 200, NULL, 900, (ARRAY[1, 5, 10])[1 + n % 3]::smallint, n
                FROM unnest(ARRAY['broadcast', 'channel_create', 'channel_read', 'channel_delete', 'channel_list', 'push'])
                     WITH ORDINALITY k(kind, n)
                CROSS JOIN (SELECT min(id) AS id FROM channels) c
                """)
        }
        let tables = ["events", "channels", "updates", "outbox", "idempotency_keys", "deliveries"]
        func rows() async throws -> [String] {
            var all: [String] = []
            for table in tables {
                // Table names are this test's own constants, not input.
                all += try await pool.query(PostgresQuery(unsafeSQL: "SELECT row_to_json(t)::text AS row FROM \(table) t ORDER BY 1"))
                    .map { try $0.decode(String.self, column: "row") }
            }
            return all
        }
        let before = try await rows()
        let seeded = 13 + 11 + 10 + 2 + 10 + 6  // events (the seed's and 12), channels, updates, outbox, keys, deliveries
        #expect(before.count == seeded)
        let applied = try await MigrationRunner(pool: pool, migrations: Migration.embedded.filter { $0.name < "0019" }).migrate()
        #expect(applied == ["0017_hot_checks_as_domains.sql", "0018_small_statistics_samples.sql"])
        #expect(try await rows() == before)
        let domainColumns = try await pool.query(
            """
            SELECT count(*) AS n FROM information_schema.columns
            WHERE table_schema = 'public' AND domain_name IS NOT NULL AND table_name = ANY (\(tables))
            """)[0].decode(Int.self, column: "n")
        #expect(domainColumns == 28)
    }

    /// Sql/0019: a key is written with its update, so keys without one go (the answers stored before 0008),
    /// with the columns that held them; the others stay as they were.
    @Test func keysWithoutAnUpdateGoWithTheStoredAnswers() async throws {
        let pool = try await Self.poolMigrated(before: "0019")
        defer { pool.close() }
        let (_, _, event) = try await Self.seed(pool)
        let key = try await Self.seedKey(pool)
        let update = try await pool.query(
            """
            INSERT INTO updates (event_id, content_state, occurred_at) VALUES (\(event), '{}', now()) RETURNING id
            """)[0].decode(Int.self, column: "id")
        try await pool.execute(
            """
            INSERT INTO idempotency_keys (api_key_id, key, request_hash, response_status, response_body, update_id)
            VALUES (\(key), 'stored-answer', \(Data(count: 32)), 202, '\\x7b7d', NULL),
                   (\(key), 'points-at-update', \(Data(count: 32)), NULL, NULL, \(update))
            """)
        let kept = "SELECT string_agg(key || ':' || update_id, ',') AS keys FROM idempotency_keys"
        #expect(try await MigrationRunner(pool: pool).migrate().first == "0019_idempotency_key_written_with_its_update.sql")
        #expect(try await pool.query(PostgresQuery(unsafeSQL: kept))[0].decode(String.self, column: "keys") == "points-at-update:\(update)")
        let columns = try await pool.query(
            """
            SELECT string_agg(column_name, ',' ORDER BY ordinal_position) AS names FROM information_schema.columns
            WHERE table_name = 'idempotency_keys' AND table_schema = 'public'
            """)[0].decode(String.self, column: "names")
        #expect(columns == "api_key_id,key,request_hash,created_at,expires_at,update_id")
        var state: SQLState?
        do {
            try await pool.execute("UPDATE idempotency_keys SET update_id = NULL")
        } catch let error as PostgresError { state = error.sqlState }
        #expect(state == .notNullViolation)
    }

    /// Sql/0013 and 0018: the tables that gain a row per update or broadcast are analyzed from a small
    /// sample (the largest statistics target of a table's columns sets its size), so a column added
    /// without a target of its own would bring back the 30,000-row sample.
    @Test func theGrowingTablesAreAnalyzedFromSmallSamples() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let defaultTargets = try await pool.query(
            """
            SELECT attrelid::regclass::text || '.' || attname AS name FROM pg_attribute
            WHERE attrelid IN ('updates'::regclass, 'deliveries'::regclass, 'idempotency_keys'::regclass)
              AND attnum > 0 AND NOT attisdropped AND (attstattarget < 0 OR attstattarget > 10)
            ORDER BY 1
            """
        ).map { try $0.decode(String.self, column: "name") }
        #expect(defaultTargets == [])
    }

    @Test func outboxWorkIsClaimedOnceWithSkipLocked() async throws {
        let pool = try await Self.migratedPool()
        defer { pool.close() }
        let (_, _, event) = try await Self.seed(pool)
        try await pool.withTransaction { tx in
            let update = try await tx.query(
                """
                INSERT INTO updates (event_id, content_state, occurred_at) VALUES (\(event), \(PostgresJSON(#"{"home":1}"#)), now())
                RETURNING id
                """)[0].decode(Int.self, column: "id")
            try await tx.execute(
                """
                UPDATE events SET latest_state = \(PostgresJSON(#"{"home":1}"#)), latest_state_at = now(), latest_update_id = \(update)
                WHERE id = \(event)
                """)
            try await tx.execute("INSERT INTO outbox (event_id, update_id) VALUES (\(event), \(update))")
        }
        let claim: PostgresQuery = """
            SELECT id FROM outbox WHERE next_attempt_at <= now() ORDER BY next_attempt_at LIMIT 10 FOR UPDATE SKIP LOCKED
            """
        let (claimedByA, claimedByB) = try await pool.withTransaction { a in
            let mine = try await a.query(claim).count
            let theirs = try await pool.withTransaction { b in try await b.query(claim).count }
            return (mine, theirs)
        }
        #expect(claimedByA == 1)
        #expect(claimedByB == 0)
    }
}
