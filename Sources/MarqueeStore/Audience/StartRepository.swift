// The start fan-out's rows (Sql/0025): runs, their keyset chunks of the audience, and one row per start. This file
// has the runs (creating, advancing under a row lock, `FOR NO KEY UPDATE SKIP LOCKED`, so one instance at a time cuts
// a run's chunks; reports; retention); StartChunkWork.swift the chunks; StartWindows.swift the starts' rows; StartRecords.swift the
// values. The fan-out service decides through MarqueeCore's planners; this performs. A start has no foreign key to
// its run or event (Sql/0032: they are its chunk's; a key would lock the row every start shares), so `purge` deletes
// a run's starts first.
import Foundation
import MarqueeCore
import Postgres

extension StartState: PostgresCodable {}
extension StartRunState: PostgresCodable {}
extension StartRunKind: PostgresCodable {}
extension StartRoute: PostgresCodable {}

/// Start runs, chunks and starts.
public struct StartRepository: Sendable {
    let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    // MARK: runs

    /// Creates the automatic run of every event whose audience is due (`startsAt − lead`, the event's own
    /// lead or `lead`) and has none: skipped as `late` when due more than `maxLateness` ago, or as `no_alert`
    /// without a start alert. Returns the runs created.
    public func createDueAutomaticRuns(
        lead: TimeInterval, maxLateness: TimeInterval, channelWait: TimeInterval, now: Date? = nil
    ) async throws -> [CreatedStartRun] {
        let rows = try await pool.withTransaction { tx in
            let rows = try await tx.query(
                Self.dueAutomaticRunsStatement(lead: lead, maxLateness: maxLateness, channelWait: channelWait, now: now))
            // Before the runs are seen, the marks of other runs of their events are committed (`windowLock`).
            for row in rows { try await tx.execute(Self.windowLock(eventID: try row.decode(Int.self, column: "event_id"))) }
            return rows
        }
        var created: [CreatedStartRun] = []
        for row in rows {
            let run = CreatedStartRun(
                id: try row.decode(column: "id"), eventID: try row.decode(column: "event_id"),
                state: try row.decodeRaw(StartRunState.self, column: "state"),
                skipReason: try row.decodeRaw(StartRunSkipReason?.self, column: "skip_reason"))
            if run.state == .running { try await estimateAudience(runID: run.id, eventID: run.eventID) }
            created.append(run)
        }
        return created
    }

    /// The check behind `createDueAutomaticRuns`, which the fan-out runs every tick over every event not over.
    /// Each event's runs and end are probed by its id: the `OFFSET 0` keeps each `NOT EXISTS` a subquery run per
    /// event (PostgreSQL turns a plain one into a join, and a join planned while the tables looked empty read
    /// every automatic run once per event: under Scripts/bench service, 500,000 rows compared for 1,000 events,
    /// 23 ms a tick, growing with the square of the events).
    static func dueAutomaticRunsStatement(lead: TimeInterval, maxLateness: TimeInterval, channelWait: TimeInterval, now: Date?)
        -> PostgresQuery
    {
        """
        WITH candidates AS (
            SELECT e.id, e.app_id, e.starts_at - make_interval(secs => coalesce(e.audience_lead, \(lead)::integer)) AS due_at,
                   e.start_alert IS NOT NULL AS has_alert, e.audience_round
            FROM events e
            WHERE e.status IN \(Self.startableEventStates.sql)
              AND e.starts_at <= coalesce(\(now), now()) + make_interval(secs => 604800)
              AND NOT EXISTS (SELECT 1 FROM start_runs r WHERE r.event_id = e.id AND r.kind = \(StartRunKind.automatic.sql)
                              AND r.audience_round = e.audience_round OFFSET 0)
              -- A postponed event's new round waits until the end of the activities already running went out
              -- (its channel then ended), so no new activity joins the channel that end is on.
              AND NOT EXISTS (SELECT 1 FROM outbox o JOIN updates u ON u.id = o.update_id
                              WHERE o.event_id = e.id AND u.action = \(UpdateAction.end.sql) OFFSET 0)
        ), due AS (
            SELECT c.*, CASE WHEN NOT c.has_alert THEN \(StartRunSkipReason.noAlert.rawValue)
                             WHEN c.due_at < coalesce(\(now), now()) - make_interval(secs => \(maxLateness)::float8)
                             THEN \(StartRunSkipReason.late.rawValue) END AS skip_reason
            FROM candidates c WHERE c.due_at <= coalesce(\(now), now())
        )
        INSERT INTO start_runs (app_id, event_id, kind, state, skip_reason, due_at, started_at, channel_wait_until, finished_at,
                                audience_round)
        SELECT app_id, id, \(StartRunKind.automatic.sql),
               CASE WHEN skip_reason IS NULL THEN \(StartRunState.running.sql) ELSE \(StartRunState.skipped.sql) END,
               skip_reason, due_at, coalesce(\(now), now()), coalesce(\(now), now()) + make_interval(secs => \(channelWait)::float8),
               CASE WHEN skip_reason IS NOT NULL THEN coalesce(\(now), now()) END, audience_round
        FROM due
        ON CONFLICT DO NOTHING
        RETURNING id, event_id, state, skip_reason
        """
    }

    /// Events in these states get start runs; `ending`, `ended` and `cancelled` ones never do.
    public static let startableEventStates: [EventStatus] = [.scheduled, .live]

    /// Creates a manual run of the event (scope checked by the caller), with an optional topic filter and
    /// alert. Throws `eventNotFound` or `eventClosed` (the event is ending, ended or cancelled).
    public func createManualRun(
        appID: Int?, eventID: Int, topics: [String]?, alert: JSONValue?, createdBy: String?, channelWait: TimeInterval
    ) async throws -> Int {
        let id: Int = try await pool.withTransaction { tx in
            guard
                let event = try await tx.query(
                    """
                    SELECT app_id, status FROM events WHERE id = \(eventID) AND (\(appID)::bigint IS NULL OR app_id = \(appID)) FOR SHARE
                    """
                ).first
            else { throw PipelineError.eventNotFound(eventID) }
            let status = try event.decodeRaw(EventStatus.self, column: "status")
            guard Self.startableEventStates.contains(status) else { throw PipelineError.eventClosed(eventID, status) }
            // Before the run is seen, the marks of the event's other runs are committed (`windowLock`).
            try await tx.execute(Self.windowLock(eventID: eventID))
            let row = try await tx.query(
                """
                INSERT INTO start_runs (app_id, event_id, kind, state, topics, alert, due_at, channel_wait_until, created_by, audience_round)
                VALUES (\(try event.decode(Int.self, column: "app_id")), \(eventID), \(StartRunKind.manual), \(StartRunState.running),
                        \(topics), \(alert?.postgresJSON)::jsonb, now(), now() + make_interval(secs => \(channelWait)::float8), \(createdBy),
                        (SELECT audience_round FROM events WHERE id = \(eventID)))
                RETURNING id
                """
            ).first!
            return try row.decode(column: "id")
        }
        try await estimateAudience(runID: id, eventID: eventID)
        return id
    }

    /// Counts the run's followers once, for its ETA.
    private func estimateAudience(runID: Int, eventID: Int) async throws {
        try await pool.execute(
            """
            WITH run AS (\(fragment: Self.runSource(runID: runID)))
            UPDATE start_runs SET estimated_audience = (
                SELECT count(*) FROM (\(fragment: AudienceRepository.followers(eventID: eventID, after: 0, through: nil, limit: nil))) f
            ) WHERE id = \(runID)
            """)
    }

    /// `run (id, event_id, app_id, topics, direct)`: the run's event, the topics it starts and whether the
    /// event's own followers are part of it (not with a topic filter).
    static func runSource(runID: Int) -> PostgresQuery {
        """
        SELECT r.id, r.event_id, e.app_id, coalesce(r.topics, e.topics) AS topics, r.topics IS NULL AS direct
        FROM start_runs r JOIN events e ON e.id = r.event_id WHERE r.id = \(runID)
        """
    }

    /// The open runs' ids.
    public func openRunIDs() async throws -> [Int] {
        try await pool.query("SELECT id FROM start_runs WHERE state IN \(StartRunState.openStates.sql) ORDER BY id").map {
            try $0.decode(Int.self, column: "id")
        }
    }

    /// Advances one run under its row lock: reads its facts, asks `decide` for the next step, and performs
    /// it. Cuts up to `cutAhead` chunks of `chunkSize` followers while fewer than that wait unclaimed.
    /// Returns the step taken, or nil when another instance holds the run.
    public func advance(
        runID: Int, lateStartCutoff: TimeInterval, chunkSize: Int, cutAhead: Int, now: Date? = nil,
        decide: @Sendable (StartRunFacts) -> StartRunStep
    ) async throws -> StartRunAdvance? {
        try await pool.withTransaction { tx in
            guard
                let row = try await tx.query(
                    """
                    SELECT r.event_id, r.state, r.kind, r.pass, r.planned_through,
                           extract(epoch FROM \(fragment: Self.lastAccepted) - r.started_at)::float8 AS lag, r.planning_done, r.next_pass_at, e.status, coalesce(\(now), now()) AS now,
                           e.ends_at - make_interval(secs => \(lateStartCutoff)::float8) AS cutoff,
                           (SELECT count(*) FROM start_chunks c WHERE c.run_id = r.id AND c.pass = r.pass AND NOT c.done) AS open_chunks,
                           (SELECT count(*) FROM start_chunks c WHERE c.run_id = r.id AND c.pass = r.pass AND NOT c.done
                              AND c.claimed_by IS NULL) AS waiting_chunks
                    FROM start_runs r JOIN events e ON e.id = r.event_id
                    WHERE r.id = \(runID) AND r.state IN \(StartRunState.openStates.sql)
                    FOR NO KEY UPDATE OF r SKIP LOCKED
                    """
                ).first
            else { return nil }
            let facts = StartRunFacts(
                state: try row.decodeRaw(StartRunState.self, column: "state"),
                eventStatus: try row.decodeRaw(EventStatus.self, column: "status"),
                planningDone: try row.decode(column: "planning_done"), openChunks: try row.decode(column: "open_chunks"),
                nextPassAt: try row.decode(column: "next_pass_at"), lateStartCutoff: try row.decode(column: "cutoff"),
                now: try row.decode(column: "now"))
            let step = decide(facts)
            switch step {
            case .wait:
                break
            case .cutChunk:
                let eventID: Int = try row.decode(column: "event_id")
                let pass: Int = try row.decode(column: "pass")
                let (through, done) = try await ChunkLeases.cut(
                    from: try row.decode(column: "planned_through"), waiting: try row.decode(column: "waiting_chunks"), cutAhead: cutAhead,
                    chunkSize: chunkSize,
                    page: { after in
                        let page = try await tx.query(
                            """
                            WITH run AS (\(fragment: Self.runSource(runID: runID)))
                            SELECT max(installation) AS through, count(*) AS n
                            FROM (\(fragment: AudienceRepository.followers(eventID: eventID, after: after, through: nil, limit: chunkSize))) page
                            """
                        ).first!
                        return (try page.decode(Int?.self, column: "through"), try page.decode(Int.self, column: "n"))
                    },
                    insert: { after, last in
                        try await tx.execute(
                            """
                            INSERT INTO start_chunks (run_id, pass, after_installation, through_installation, next_attempt_at)
                            VALUES (\(runID), \(pass), \(after), \(last), coalesce(\(now), now()))
                            """)
                    })
                try await tx.execute(
                    "UPDATE start_runs SET planned_through = \(through), planning_done = \(done) WHERE id = \(runID)")
            case .roll(let next):
                try await tx.execute(
                    """
                    UPDATE start_runs SET state = \(StartRunLifecycle.transition(from: facts.state, on: .firstPassDone) ?? .rolling), next_pass_at = \(next),
                        first_pass_done_at = coalesce(first_pass_done_at, coalesce(\(now), now()))
                    WHERE id = \(runID)
                    """)
            case .beginPass:
                try await tx.execute(
                    """
                    UPDATE start_runs SET pass = pass + 1, planned_through = 0, planning_done = false, next_pass_at = NULL WHERE id = \(runID)
                    """)
            case .finish(let state):
                try await tx.execute(
                    """
                    WITH closed AS (
                        UPDATE start_chunks SET done = true, finished_at = now() WHERE run_id = \(runID) AND NOT done
                        RETURNING last_accepted_at)
                    UPDATE start_runs SET state = \(state), finished_at = coalesce(\(now), now()),
                        first_pass_done_at = coalesce(first_pass_done_at, coalesce(\(now), now())),
                        last_accepted_at = greatest(last_accepted_at, (SELECT max(last_accepted_at) FROM closed))
                    WHERE id = \(runID)
                    """)
                // Starts still planned (a retry not yet due) are not sent any more.
                try await tx.execute(
                    """
                    UPDATE starts SET state = \(StartState.skipped), reason = \(StartSkipReason.eventOver.rawValue), next_attempt_at = NULL
                    WHERE run_id = \(runID) AND state = \(StartState.planned)
                    """)
                // Every chunk's counts as the run ends (the step above may have settled starts of done ones).
                try await tx.execute("UPDATE start_chunks c SET counts = \(fragment: Self.chunkCounts) WHERE run_id = \(runID)")
            }
            let firstPassEnds: Bool =
                switch step {
                case .roll, .finish: facts.state == .running
                default: false
                }
            return StartRunAdvance(
                step: step, kind: try row.decodeRaw(StartRunKind.self, column: "kind"),
                firstPassLag: firstPassEnds ? try row.decode(Double?.self, column: "lag") : nil)
        }
    }

    // MARK: retention

    /// Deletes the runs (and their chunks and starts) of events that ended or were cancelled and whose runs
    /// finished before `cutoff`, `batch` starts per statement and at most `statements` statements; returns the
    /// starts deleted.
    public func purge(finishedBefore cutoff: Date, batch: Int = 50_000, statements: Int = 20) async throws -> Int {
        let over = EventLifecycle.finalStates.sql
        let purged = try await BatchedStatements.run(batch: batch, limit: statements) {
            try await pool.execute(
                """
                DELETE FROM starts WHERE id IN (
                    SELECT s.id FROM start_runs r JOIN events e ON e.id = r.event_id JOIN starts s ON s.run_id = r.id
                    WHERE r.finished_at < \(cutoff) AND e.status IN \(over) LIMIT \(batch))
                """)
        }
        // A window a holder left when its run ended with the event names starts nobody will settle now.
        try await pool.execute(
            """
            DELETE FROM start_windows w USING start_runs r, events e
            WHERE r.id = w.run_id AND e.id = r.event_id AND r.finished_at < \(cutoff) AND e.status IN \(over)
            """)
        try await pool.execute(
            """
            DELETE FROM start_runs r USING events e
            WHERE e.id = r.event_id AND r.finished_at < \(cutoff) AND e.status IN \(over)
              AND NOT EXISTS (SELECT 1 FROM starts s WHERE s.run_id = r.id)
            """)
        return purged
    }

    // MARK: reports

    /// The event's runs, newest first, with their counts (at most `limit`).
    public func runs(eventID: Int, limit: Int = 20) async throws -> [StartRunReport] {
        var reports: [StartRunReport] = []
        for row in try await pool.query(
            """
            SELECT id, event_id, kind, state, skip_reason, topics, due_at, started_at, first_pass_done_at, finished_at,
                   \(fragment: Self.lastAccepted) AS last_accepted_at, estimated_audience, now() AS now
            FROM start_runs r WHERE event_id = \(eventID) ORDER BY id DESC LIMIT \(limit)
            """)
        {
            reports.append(
                StartRunReport(
                    id: try row.decode(column: "id"), eventID: try row.decode(column: "event_id"),
                    kind: try row.decodeRaw(StartRunKind.self, column: "kind"), state: try row.decodeRaw(StartRunState.self, column: "state"),
                    skipReason: try row.decodeRaw(StartRunSkipReason?.self, column: "skip_reason"), topics: try row.decode(column: "topics"),
                    dueAt: try row.decode(column: "due_at"), startedAt: try row.decode(column: "started_at"),
                    firstPassDoneAt: try row.decode(column: "first_pass_done_at"), finishedAt: try row.decode(column: "finished_at"),
                    lastAcceptedAt: try row.decode(column: "last_accepted_at"), estimatedAudience: try row.decode(column: "estimated_audience"),
                    now: try row.decode(column: "now")))
        }
        guard !reports.isEmpty else { return [] }
        let ids = reports.map { String($0.id) }
        var index: [Int: Int] = [:]
        for (position, report) in reports.enumerated() { index[report.id] = position }
        // Done chunks' kept counts and the open chunks' starts (Sql/0033), not a count over every start of the run.
        for row in try await pool.query(
            """
            WITH chunks AS (SELECT * FROM start_chunks WHERE run_id = ANY (\(ids)::bigint[]))
            SELECT run_id, state, reason, path, sum(n)::bigint AS n FROM (
                SELECT c.run_id, g.state, g.reason, g.path, g.n
                FROM chunks c, jsonb_to_recordset(c.counts) AS g (state text, reason text, path text, n bigint)
                WHERE c.counts IS NOT NULL
                UNION ALL
                SELECT c.run_id, x.state, x.reason, x.path, x.n FROM chunks c,
                    LATERAL (\(fragment: Self.chunkGroups)) x
                WHERE c.counts IS NULL
            ) t GROUP BY 1, 2, 3, 4
            """)
        {
            guard let position = index[try row.decode(Int.self, column: "run_id")] else { continue }
            reports[position].counts.add(
                state: try row.decodeRaw(StartState.self, column: "state"), reason: try row.decode(column: "reason"),
                route: try row.decodeRaw(StartRoute?.self, column: "path"), count: try row.decode(column: "n"))
        }
        // Adoption: accepted starts whose activity the app registered for the event within 10 minutes. Read from
        // the event's activities to their starts, so a run whose audience has registered few costs little (from
        // the starts, each read of the report went through every accepted start of the run).
        for row in try await pool.query(
            """
            SELECT s.run_id, coalesce(s.os_major::text, 'unknown') AS os_major, count(DISTINCT s.id)::bigint AS n
            FROM start_runs r
            JOIN activities a ON a.event_id = r.event_id
            JOIN starts s ON s.event_id = r.event_id AND s.audience_round = r.audience_round AND s.installation = a.installation
                         AND s.went_out AND s.run_id = r.id
            WHERE r.id = ANY (\(ids)::bigint[]) AND s.state = \(StartState.accepted)
              AND a.created_at >= s.sent_at - interval '1 minute' AND a.created_at <= s.answered_at + interval '10 minutes'
            GROUP BY 1, 2
            """)
        {
            guard let position = index[try row.decode(Int.self, column: "run_id")] else { continue }
            reports[position].adoption[try row.decode(String.self, column: "os_major")] = try row.decode(Int.self, column: "n")
        }
        return reports
    }

    /// Installations of the app started (accepted) in the last `window` seconds whose activity was registered
    /// within 10 minutes, and all accepted, by OS major version (for the metrics).
    public func adoption(window: TimeInterval) async throws -> [(osMajor: String, accepted: Int, adopted: Int)] {
        try await pool.query(
            """
            SELECT coalesce(s.os_major::text, 'unknown') AS os_major, count(*)::bigint AS accepted,
                   count(*) FILTER (WHERE EXISTS (
                       SELECT 1 FROM activities a WHERE a.installation = s.installation AND a.event_id = s.event_id
                         AND a.created_at >= s.sent_at - interval '1 minute' AND a.created_at <= s.answered_at + interval '10 minutes'))::bigint
                       AS adopted
            FROM starts s
            WHERE s.state = \(StartState.accepted) AND s.answered_at > now() - make_interval(secs => \(window)::float8)
            GROUP BY 1
            """
        ).map { row in
            (
                try row.decode(String.self, column: "os_major"), try row.decode(Int.self, column: "accepted"),
                try row.decode(Int.self, column: "adopted")
            )
        }
    }
}
