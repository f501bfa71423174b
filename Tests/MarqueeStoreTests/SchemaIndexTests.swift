import Foundation
import MarqueeCore
import MarqueeTestSupport
import Testing

@testable import MarqueeStore
@testable import Postgres

/// The partial indexes the hot statements rely on: each is written from the lifecycle's named state sets,
/// and each statement that relies on one uses it in a generic plan (the plan a long-lived prepared statement
/// gets), which a state list bound as a parameter would not allow.
@Suite(.enabled(if: TestDatabase.available))
struct SchemaIndexTests {
    /// Index, table, key, and the predicate generated from the sets.
    static let partialIndexes: [(name: String, table: String, key: String, predicate: PostgresQuery)] = [
        ("events_to_start", "events", "starts_at", "status IN \(EventLifecycle.toStartStates.sql)"),
        ("events_to_end", "events", "ends_at", "status IN \(EventLifecycle.startedStates.sql)"),
        ("events_ending", "events", "id", "status IN \(EventLifecycle.endingStates.sql)"),
        ("events_to_purge", "events", "id", "status IN \(EventLifecycle.finalStates.sql) AND updates_purged_at IS NULL"),
        ("channels_one_live_per_event", "channels", "event_id", "state IN \(ChannelLifecycle.currentStates.sql)"),
        ("channels_to_delete", "channels", "ended_at", "state IN \(ChannelLifecycle.deleteDueStates.sql)"),
        ("updates_pending", "updates", "event_id", "disposition = \(UpdateDisposition.pending.sql)"),
        (
            "activities_mirrored", "activities", "event_id, id",
            "state IN \(ActivityLifecycle.mirroredStates.sql) AND push_type = \(ActivityPushType.token.sql)"
        ),
        // went_out: generated from the started states (below).
        ("starts_once_per_event", "starts", "event_id, audience_round, installation", "went_out"),
        ("starts_by_installation", "starts", "installation, sent_at", "went_out"),
        ("start_runs_open", "start_runs", "id", "state IN \(StartRunState.openStates.sql)"),
        ("mirror_passes_one_running", "mirror_passes", "event_id", "state = \(MirrorPassState.running.sql)"),
        ("start_runs_one_automatic", "start_runs", "event_id, audience_round", "kind = \(StartRunKind.automatic.sql)"),
    ]

    @Test func eachPartialIndexIsWrittenFromItsStateSet() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        for index in Self.partialIndexes {
            // The server's own rendering of both predicates: a probe index built from the set, rolled back.
            let (actual, generated) = try await f.pool.withConnection { connection in
                try await connection.execute("BEGIN")
                try await connection.execute(
                    PostgresQuery(
                        unsafeSQL: """
                            CREATE INDEX set_probe ON \(index.table) (\(index.key)) WHERE \(index.predicate.sql)
                            """))
                let rows = try await connection.query(
                    """
                    SELECT c.relname AS name, pg_get_expr(i.indpred, i.indrelid) AS predicate
                    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                    WHERE c.relname = ANY (\([index.name, "set_probe"])::text[])
                    """)
                var predicates: [String: String] = [:]
                for row in rows { predicates[try row.decode(String.self, column: "name")] = try row.decode(String?.self, column: "predicate") }
                try await connection.execute("ROLLBACK")
                return (predicates[index.name], predicates["set_probe"])
            }
            #expect(actual != nil, "\(index.name) is not a partial index")
            #expect(actual == generated, "\(index.name)")
        }
    }

    @Test func aStartsWentOutIsGeneratedFromTheStartedStates() async throws {
        // Sql/0036: the started states' indexes name a column generated from the set, so an answer that keeps a
        // start among them changes no indexed column.
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let started: PostgresQuery = "state IN \(StartLifecycle.startedStates.sql)"
        let (actual, generated) = try await f.pool.withConnection { connection in
            try await connection.execute("BEGIN")
            try await connection.execute(
                PostgresQuery(unsafeSQL: "ALTER TABLE starts ADD COLUMN set_probe boolean GENERATED ALWAYS AS (\(started.sql)) STORED"))
            let rows = try await connection.query(
                """
                SELECT a.attname AS name, pg_get_expr(d.adbin, d.adrelid) AS expression
                FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
                WHERE a.attrelid = 'starts'::regclass AND a.attgenerated = 's' AND a.attname = ANY (\(["went_out", "set_probe"])::name[])
                """)
            var expressions: [String: String] = [:]
            for row in rows { expressions[try row.decode(String.self, column: "name")] = try row.decode(String.self, column: "expression") }
            try await connection.execute("ROLLBACK")
            return (expressions["went_out"], expressions["set_probe"])
        }
        #expect(actual != nil, "starts.went_out is not a generated column")
        #expect(actual == generated)
    }

    /// What the planner picks for `statement` in a generic plan, with sequential scans priced out, so a plan
    /// that could use the index does.
    static func genericPlan(of statement: PostgresQuery, on pool: PostgresPool, seqScan: Bool = false) async throws -> String {
        try await pool.withConnection { connection in
            let types = try await statement.binds.asyncMap { bind in
                bind.oid == 0
                    ? "unknown"
                    : try await connection.query("SELECT format_type(\(Int(bind.oid))::oid, NULL) AS t")[0]
                        .decode(String.self, column: "t")
            }
            try await connection.execute("SET plan_cache_mode = force_generic_plan")
            if !seqScan { try await connection.execute("SET enable_seqscan = off") }
            let parameters = types.isEmpty ? "" : "(" + types.joined(separator: ", ") + ")"
            try await connection.execute(PostgresQuery(unsafeSQL: "PREPARE plan_probe\(parameters) AS \(statement.sql)"))
            let arguments = types.isEmpty ? "" : "(" + Array(repeating: "NULL", count: types.count).joined(separator: ", ") + ")"
            let plan = try await connection.query(PostgresQuery(unsafeSQL: "EXPLAIN EXECUTE plan_probe\(arguments)"))
                .map { try $0.decode(String.self, column: "QUERY PLAN") }.joined(separator: "\n")
            try await connection.execute("DEALLOCATE plan_probe")
            try await connection.execute("RESET ALL")
            return plan
        }
    }

    /// The broadcast record's estimated cost does not depend on its parameters: a custom plan for a batch of
    /// one, four or `recordRowsEstimate` records costs what the generic plan costs, so PostgreSQL keeps the
    /// generic plan instead of planning every call anew. A LIMIT of the bare count, and the event states
    /// tested with `= ANY` (a custom plan proved `events_ending` from them), made the custom plans cheaper.
    /// A live service's tables: a thousand events with channels, thirty updates each, analyzed.
    static func fillLikeALiveService(_ f: PipelineFixture) async throws {
        try await f.pool.execute(
            """
            INSERT INTO events (app_id, external_id, kind, attribute_type_id, attributes, storage_policy, starts_at, ends_at)
            SELECT \(f.appID), 'match-' || g, 'match', \(f.typeID), '{}', 'mostRecent', now(), now() + interval '2 hours'
            FROM generate_series(1, 1000) g
            """)
        try await f.pool.execute("INSERT INTO channels (app_id, event_id, storage_policy) SELECT app_id, id, storage_policy FROM events")
        try await f.pool.execute(
            """
            INSERT INTO updates (event_id, content_state, occurred_at, disposition, disposed_at)
            SELECT id, '{"home": 0}', now(), 'broadcast', now() FROM events, generate_series(1, 30)
            """)
        try await f.pool.execute("ANALYZE")
    }

    @Test func theRecordsPlanCostsTheSameForAnyBatchUpToItsEstimate() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        try await Self.fillLikeALiveService(f)
        func cost(_ plan: String) -> String? {
            plan.split(separator: "\n").first.flatMap { line in
                line.firstRange(of: "cost=").map { String(line[$0.lowerBound...].prefix { $0 != " " }) }
            }
        }
        func custom(_ count: Int) async throws -> String? {
            let rows = try await f.pool.query("EXPLAIN \(fragment: OutboxRepository.recordStatement(input: [], count: count, now: nil))")
            return cost(try rows.map { try $0.decode(String.self, column: "QUERY PLAN") }.joined(separator: "\n"))
        }
        let generic = cost(try await Self.genericPlan(of: OutboxRepository.recordStatement(input: [], count: 1, now: nil), on: f.pool, seqScan: true))
        #expect(generic != nil)
        for count in [1, 4, OutboxRepository.recordRowsEstimate] {
            let customCost = try await custom(count)
            #expect(customCost == generic, "a batch of \(count): \(customCost ?? "-") against \(generic ?? "-")")
        }
    }

    /// The record reads its channels and events by their primary keys, on a new database (serve's warm-up makes
    /// its first generic plan there) and on a live one, with sequential scans allowed. Joined to the input rows
    /// alone, the generic plan read every channel for each record, and every live event too when made on a new
    /// database (Scripts/bench service: eight thousand sequential scans of a thousand rows each, in a minute).
    @Test func theRecordFindsItsChannelsAndEventsByTheirKeys() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let record = OutboxRepository.recordStatement(input: [], count: 1, now: nil)
        for tables in ["new", "live"] {
            if tables == "live" { try await Self.fillLikeALiveService(f) }
            let plan = try await Self.genericPlan(of: record, on: f.pool, seqScan: true)
            for index in ["channels_pkey", "events_pkey"] { #expect(plan.contains(index), "\(tables) tables, no \(index):\n\(plan)") }
            for table in ["channels", "events"] { #expect(!plan.contains("Seq Scan on \(table)"), "\(tables) tables:\n\(plan)") }
        }
    }

    @Test func theClaimSweepAndPurgeStatementsUseTheirPartialIndexesInGenericPlans() async throws {
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let sweep = ChannelRepository.dueWorkStatements(leadTime: 7200, deleteDelay: 900, endGrace: 1800, now: nil, limit: 100)
        let eventReads = Dictionary(uniqueKeysWithValues: sweep.events.map { ("\($0.0)", $0.1) })
        let channelReads = Dictionary(uniqueKeysWithValues: sweep.channels.map { ("\($0.0)", $0.1) })
        func read(_ reads: [String: PostgresQuery], _ name: String) throws -> PostgresQuery {
            try #require(reads.first { $0.key.hasSuffix(name + ">") || $0.key.hasSuffix(name) }?.value, "\(name) in \(reads.keys)")
        }
        let expectations: [(String, PostgresQuery, [String])] = [
            ("claim", OutboxRepository.claimStatement(instance: "probe", limit: 64, lease: 120, pacing: 1, now: nil), ["updates_pending"]),
            ("claimed rows", OutboxRepository.claimedRowsStatement(ids: [], tokens: []), ["updates_pending"]),
            ("mark started", EventRepository.markStartedStatement(limit: 100, now: nil), ["events_to_start"]),
            ("events needing a channel", try read(eventReads, "eventsNeedingChannel"), ["events_to_start"]),
            ("events to end", try read(eventReads, "eventsToEnd"), ["events_to_end", "events_to_start"]),
            ("ends without a channel", try read(eventReads, "endsWithoutChannel"), ["events_ending"]),
            ("deletions due", try read(channelReads, "deletionsDue"), ["channels_to_delete"]),
            ("purge updates", EventRepository.purgeUpdatesStatement(endedBefore: Date(), batch: 20), ["events_to_purge"]),
            ("audience page", AudienceRepository.pageStatement(eventID: 1, after: 0, limit: 1000), ["follows_event_unique", "follows_topic_unique"]),
        ]
        for (what, statement, indexes) in expectations {
            let plan = try await Self.genericPlan(of: statement, on: f.pool)
            for index in indexes { #expect(plan.contains(index), "\(what) does not use \(index):\n\(plan)") }
        }
    }

    @Test func setBasedChannelTransitionsAreWrittenFromTheLifecycle() {
        // The record's end and the ChannelNotRegistered of a broadcast move channels in SQL; the target states come
        // from ChannelLifecycle, and a state the events do not apply to keeps its value.
        #expect(OutboxRepository.lostState.sql == "CASE state WHEN 'open' THEN 'lost' WHEN 'ending' THEN 'lost' ELSE state END")
        #expect(OutboxRepository.endedState.sql == "CASE c.state WHEN 'open' THEN 'ended' WHEN 'ending' THEN 'ended' ELSE c.state END")
        #expect(ChannelLifecycle.after([.endRequested, .endSent], from: .open)?.state == .ended)
        #expect(ChannelLifecycle.after([.endSent], from: .open) == nil)
    }

    @Test func theIngestFindsItsEventByTheKey() async throws {
        // The ingest's event row comes by its id, whatever its status guard and whatever the statistics: the generic
        // plan reads the primary key, not a partial index on status, nor the whole table. serve prepares the
        // statement at start (its warm-up), so on a new database its first generic plans are made while `events` is
        // empty and has never been analyzed; matched to the event through the input row, such a plan read every
        // event for each update (under Scripts/bench service, a variant of the statement at 3.6 times the buffers).
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let statements: [(UpdateAction, PostgresQuery)] = UpdateAction.allCases.map { action in
            (
                action,
                IngestRepository.write(
                    eventID: 1, UpdateDraft(action: action, occurredAt: Date()), state: ["home": 1],
                    appID: 1, expectedUpdateID: .some(5),
                    idempotency: IdempotencyRequest(apiKeyID: 1, key: "k", requestHash: Data(repeating: 1, count: 32), earlierHashes: []),
                    now: nil, pacing: 1)
            )
        }
        let never = try await f.pool.query("SELECT reltuples::float8 AS n FROM pg_class WHERE relname = 'events'")[0].decode(Double.self, column: "n")
        try #require(never < 0, "events of a new database has never been analyzed")
        for (action, statement) in statements {
            let plan = try await Self.genericPlan(of: statement, on: f.pool, seqScan: true)
            #expect(plan.contains("events_pkey"), "\(action), empty and never analyzed:\n\(plan)")
        }
        try await f.pool.execute(
            """
            INSERT INTO events (app_id, external_id, kind, attribute_type_id, attributes, storage_policy, starts_at, status)
            SELECT \(f.appID), 'e' || g, 'match', \(f.typeID), '{}', 'mostRecent', now() + make_interval(mins => g),
                   CASE WHEN g % 2 = 0 THEN 'live' ELSE 'scheduled' END
            FROM generate_series(1, 2000) AS g
            """)
        try await f.pool.execute("ANALYZE events")
        for (action, statement) in statements {
            let plan = try await Self.genericPlan(of: statement, on: f.pool, seqScan: true)
            #expect(plan.contains("events_pkey"), "\(action):\n\(plan)")
            for index in ["events_to_start", "events_to_end", "events_ending"] { #expect(!plan.contains(index), "\(action) uses \(index):\n\(plan)") }
        }
    }

    @Test func aChunksMembersProbeTheStartsOfEachMember() async throws {
        // serve prepares the members read while `starts` is empty and has never been analyzed, and a run then fills
        // it. Every read of starts in the generic plan is a probe by the member's installation: a subquery pulled up
        // into a join (the run's start for the token, once without its LIMIT) was planned as one read of every start
        // of the run per chunk, which grew with the run (under Scripts/bench fanout, 133 µs a member where the
        // probes take 44 to 51).
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let chunk = ClaimedStartChunk(
            id: 1, runID: 1, eventID: 1, appID: f.appID, after: 0, through: 1000, attempts: 0, runAlert: nil, channelWaitUntil: Date())
        let members = StartRepository.membersStatement(chunk, maxConcurrentWindow: 28800, now: nil)
        let plan = try await Self.genericPlan(of: members, on: f.pool, seqScan: true)
        let lines = plan.split(separator: "\n")
        let startsScans = lines.indices.filter { lines[$0].contains(" on starts ") }
        #expect(!startsScans.isEmpty, "\(plan)")
        for index in startsScans {
            let indexCondition = lines[(index + 1)...].prefix { !$0.contains("->") }.filter { $0.contains("Index Cond:") }
            #expect(indexCondition.contains { $0.contains("(installation = ") }, "\(lines[index]):\n\(plan)")
        }
        // The event's activities the app registered (one activity per device per event) are probed by member too.
        let activityScans = lines.indices.filter { lines[$0].contains(" on activities ") }
        #expect(!activityScans.isEmpty, "\(plan)")
        for index in activityScans {
            let indexCondition = lines[(index + 1)...].prefix { !$0.contains("->") }.filter { $0.contains("Index Cond:") }
            #expect(indexCondition.contains { $0.contains("(installation = ") }, "\(lines[index]):\n\(plan)")
        }
    }

    @Test func aWindowsMarkProbesTheStartsAndInstallationOfEachRow() async throws {
        // Prepared while `starts` is empty, as serve prepares it: the "already started" read of each row of a window is
        // a probe by its installation, never a read of the event's starts, and its installation is found by its key.
        // With retries in the window, their rows are found by id (a join to the window's rows was planned as a hashed
        // read of every start).
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let chunk = ClaimedStartChunk(
            id: 1, runID: 1, eventID: 1, appID: f.appID, after: 0, through: 1000, attempts: 0, runAlert: nil, channelWaitUntil: Date())
        for retry in [nil, 7] as [Int?] {
            let mark = StartRepository.markStatement(
                chunk, [PlannedStart(installation: 1, token: String(repeating: "a", count: 64), osMajor: 18, route: .channel, plannedStartID: retry)],
                now: nil)
            let plan = try await Self.genericPlan(of: mark, on: f.pool, seqScan: true)
            #expect(!plan.contains("Seq Scan on starts") && !plan.contains("Seq Scan on installations"), "\(plan)")
            #expect(plan.contains("installations_pkey"), "\(plan)")
            let lines = plan.split(separator: "\n")
            for index in lines.indices where lines[index].contains(" on starts ") && lines[index].contains("Index") {
                let condition = lines[(index + 1)...].prefix { !$0.contains("->") }.filter { $0.contains("Index Cond:") }
                #expect(condition.contains { $0.contains("(installation = ") || $0.contains("(id = ") }, "\(lines[index]):\n\(plan)")
            }
            #expect(plan.contains("starts_pkey") == (retry != nil), "\(plan)")
        }
    }

    @Test func aWindowsAnswersFindTheirRetriesByTheirKey() async throws {
        // Prepared while `starts` is empty: the answers of a window's retries update their rows found by id, never by a
        // read of every start; a window of first sends only inserts.
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let chunk = ClaimedStartChunk(
            id: 1, runID: 1, eventID: 1, appID: f.appID, after: 0, through: 1000, attempts: 0, runAlert: nil, channelWaitUntil: Date())
        let window = MarkedWindow(id: 1, markedAt: Date(), starts: [])
        for retry in [nil, 7] as [Int?] {
            let start = SendingStart(
                installation: 1, token: String(repeating: "a", count: 64), osMajor: 18, route: .channel, attempt: 1, retriedStartID: retry)
            let record = StartRepository.recordStatement(
                chunk, window: window,
                [StartAnswerRecord(start: start, state: .accepted, reason: nil, status: 200, retryAfter: nil, apnsUniqueID: nil)], last: true,
                windowAccepted: false, now: nil)
            let plan = try await Self.genericPlan(of: record, on: f.pool, seqScan: true)
            #expect(!plan.contains("Seq Scan on starts"), "\(plan)")
            #expect(plan.contains("starts_pkey") == (retry != nil), "\(plan)")
        }
        // A skip of a planned start finds it by id too.
        let skip = StartRepository.skipRetriesStatement([
            SkippedStart(installation: 1, token: String(repeating: "a", count: 64), osMajor: 18, reason: .throttled, plannedStartID: 7)
        ])
        let plan = try await Self.genericPlan(of: skip, on: f.pool, seqScan: true)
        #expect(!plan.contains("Seq Scan on starts") && plan.contains("starts_pkey"), "\(plan)")
    }

    @Test func theAutomaticRunCheckProbesEachEventsRunsAndEnd() async throws {
        // The fan-out runs the check every tick over every event not over, so each event's automatic runs and its end
        // are probed by the event's id, whatever the statistics: a `NOT EXISTS` pulled up into a join, planned while
        // the tables looked empty, read every automatic run once per event (the cost grew with the square of the
        // events).
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let check = StartRepository.dueAutomaticRunsStatement(lead: 600, maxLateness: 1800, channelWait: 60, now: nil)
        for analyzed in [false, true] {
            if analyzed {
                try await f.pool.execute(
                    """
                    INSERT INTO events (app_id, external_id, kind, attribute_type_id, attributes, storage_policy, starts_at, status)
                    SELECT \(f.appID), 'e' || g, 'match', \(f.typeID), '{}', 'mostRecent', now() + make_interval(mins => g), \(EventStatus.scheduled.sql)
                    FROM generate_series(1, 500) AS g
                    """)
                try await f.pool.execute("ANALYZE events")
            }
            let plan = try await Self.genericPlan(of: check, on: f.pool, seqScan: true)
            let lines = plan.split(separator: "\n")
            for table in ["start_runs", "outbox"] {
                let scans = lines.indices.filter { lines[$0].contains("Scan") && lines[$0].contains(" on \(table) ") }
                #expect(!scans.isEmpty, "\(table), analyzed \(analyzed):\n\(plan)")
                for index in scans {
                    let indexCondition = lines[(index + 1)...].prefix { !$0.contains("->") }.filter { $0.contains("Index Cond:") }
                    #expect(indexCondition.contains { $0.contains("(event_id = ") }, "\(lines[index]), analyzed \(analyzed):\n\(plan)")
                }
            }
        }
    }

    @Test func anInstallationIDIsFoundAppByAppThroughTheAppsKey() async throws {
        // Sql/0035 dropped the index of installation ids alone: a lookup without an app reads each app's
        // (app_id, installation_id), with or without an app given.
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        for appID in [nil, f.appID] {
            let plan = try await Self.genericPlan(of: InstallationRepository.findStatement(installationID: "i", appID: appID), on: f.pool)
            #expect(plan.contains("installations_installation_id_unique"), "app \(appID.map(String.init) ?? "any"):\n\(plan)")
        }
    }

    @Test func aBoundStateListWouldLoseThePartialIndex() async throws {
        // The reason the sets are spliced as text: the same read with the list as a parameter cannot use it.
        let f = try await PipelineFixture.make()
        defer { f.pool.close() }
        let spliced: PostgresQuery = "SELECT id FROM events WHERE status IN \(EventLifecycle.endingStates.sql) ORDER BY id LIMIT 10"
        let bound: PostgresQuery =
            "SELECT id FROM events WHERE status = ANY (\(EventLifecycle.endingStates.map(\.rawValue))::text[]) ORDER BY id LIMIT 10"
        #expect(try await Self.genericPlan(of: spliced, on: f.pool).contains("events_ending"))
        #expect(try await Self.genericPlan(of: bound, on: f.pool).contains("events_ending") == false)
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async throws -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
